"""The demo behind ``manage.py demo``: its fleet (users, the kit's backends, three tickets) and the
processes it starts and always stops."""
