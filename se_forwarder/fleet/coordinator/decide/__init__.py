"""The decision pass and what people decide, pure: the fold, the policy and the clock in, decisions out.

``evaluate.evaluate`` walks the rule chain (``rules``) over every open event: who is unavailable
(``availability``), the budgets per scope (``scopes``), VMs whose queue another shares
(``queues``), the path through ARM's ``acknowledge`` when no agent watches (``arm_path``).
``control`` turns pause, resume, hold, release and approve-now into decisions; ``events`` makes
each decision its CloudEvent, and ``wording`` the words of its reason.
"""
