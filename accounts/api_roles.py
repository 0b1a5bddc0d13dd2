"""REST API of people's roles and reviewer capacities: read them, grant and revoke (admins).

Each grant or revoke goes through ``accounts.services`` and is a ledger entry; a change that
changes nothing (granting a group the person has) answers ``changed: false``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import users_visible
from accounts.services import group_grant, group_revoke
from core.api import StrictInputSerializer
from core.roles import GRANTABLE_GROUPS


class PersonSerializer(serializers.ModelSerializer):
    groups = serializers.SerializerMethodField()

    class Meta:
        model = User
        fields = ["username", "is_active", "groups"]
        read_only_fields = fields

    def get_groups(self, user: User) -> list[str]:
        return sorted(group.name for group in user.groups.all())


class GroupChangeSerializer(StrictInputSerializer):
    group = serializers.ChoiceField(choices=GRANTABLE_GROUPS)
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class GroupChangedSerializer(PersonSerializer):
    changed = serializers.BooleanField(read_only=True)

    class Meta(PersonSerializer.Meta):
        fields = [*PersonSerializer.Meta.fields, "changed"]
        read_only_fields = fields


class PersonViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """People and their groups: an admin sees everyone, anyone else only themselves."""

    serializer_class = PersonSerializer
    lookup_field = "username"
    lookup_value_regex = r"[\w.@+-]+"

    def get_queryset(self) -> Any:
        return users_visible(actor=self.request.user)

    def _change(self, request: Request, grant: bool) -> Response:
        body = GroupChangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        person = self.get_object()
        change = group_grant if grant else group_revoke
        changed = change(actor=request.user, user=person, **body.validated_data)
        person = self.get_queryset().get(pk=person.pk)  # groups as they are now
        data = dict(PersonSerializer(person).data)
        data["changed"] = changed
        return Response(data)

    @extend_schema(request=GroupChangeSerializer, responses={200: GroupChangedSerializer})
    @action(detail=True, methods=["post"])
    def grant(self, request: Request, username: str | None = None) -> Response:
        """Add a role or reviewer capacity (admins only; ledgered)."""
        return self._change(request, grant=True)

    @extend_schema(request=GroupChangeSerializer, responses={200: GroupChangedSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, username: str | None = None) -> Response:
        """Take a role or reviewer capacity away (admins only; ledgered; the last admin keeps the role: 409)."""
        return self._change(request, grant=False)
