"""Gate policies: the metrics they name, their rules, and how a YAML document becomes one."""
