"""Tools for developing repokit (not part of the installed package)."""
