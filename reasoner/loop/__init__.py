"""The one reasoning loop: plans that own their steps, the drivers that walk them, the reasoner.

- ``step``: the vocabulary, ``Step`` and ``StepInputs``.
- ``plan``: ``LoopPlan``, the base of every plan: the model step (the stored reply, or the model's
  reply recorded) and the tool step, written once.
- ``rounds``: ``DualPlan`` and ``MonoPlan`` (the views, prompts and decisions of their rounds).
- ``react``: ``ReActPlan``; ``react_budget``: its step budget.
- ``calls``: a reply's tool calls and the context each call runs with.
- ``tool_round``: a round's calls run in this process, approvals included.
- ``drive``: ``walk`` (the loop as a generator of work), ``drive`` and ``adrive``.
- ``reasoner``: ``Reasoner`` and its constructors ``DualModelReasoner``, ``MonoModelReasoner``
  and ``ReActReasoner``.
- ``kinds``: ``plan_for(kind)``; ``replay``: where a stored run stands (resume).

The Celery driver (``tandem.tasks``) runs the same plans one step per message. Nothing is imported
here: import the module you need.
"""
