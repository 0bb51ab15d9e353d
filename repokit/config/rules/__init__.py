"""Validation rules, one function per rule family; each takes a RuleContext and reports
Diagnostics into it. ``catalog.RULES`` lists every rule id with its severity and load stage."""
