"""Keeping every model request inside its role's context window.

- ``counting``: ``Tokenizer`` (how a role's tokens are counted: the model's or the host's
  tokenizer, else ``conservative_estimate``) and ``TokenCache`` (counts kept per stored message,
  so checking a request costs a sum, not a tokenization of the whole conversation).
- ``window``: what a host says its context is (llama.cpp's ``/props``, vLLM's ``/v1/models``),
  asked once per process, and LiteLLM's model map.
- ``budget``: ``ContextBudget`` (a role's window, the reserve for its reply, how tokens are
  counted) and ``budget_of(model)``.
- ``compaction``: ``Compactor``, the seam that decides what stands in for the rounds left out of
  a request (``DropRounds``: a marker; a summarizer later), and the ``Compaction`` it reports.
- ``fitting``: ``fit_history``, the deterministic trim every plan runs before a model call.

Nothing here changes a job's stored memory: only the request a model step sends.
"""
