"""Model hosts: the ``ModelService`` seam and the services behind it.

``model_service`` (the protocol, ``ModelRequest``, ``agenerate``), ``litellm_service`` (any host
LiteLLM reaches), with its replies (``litellm_replies``), streams (``litellm_stream``) and errors
(``litellm_errors``), the direct path to OpenAI-compatible hosts (``direct_http``) and the retry
policy of transient failures (``retry_policy``). The scripted test double is
``tandem.reasoner.testing``. Nothing is imported here: LiteLLM is slow to import.
"""
