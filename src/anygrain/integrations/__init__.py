"""anygrain where users build: agents and RAG frameworks, each an optional extra.

* :mod:`anygrain.integrations.mcp` -- an MCP server over one index (``anygrain mcp INDEX``;
  the ``mcp`` extra)
* :mod:`anygrain.integrations.langchain` -- ``AnygrainRetriever``, a LangChain retriever
  (the ``langchain`` extra)
* :mod:`anygrain.integrations.llamaindex` -- ``AnygrainRetriever``, a LlamaIndex retriever
  (the ``llamaindex`` extra)
* :mod:`anygrain.integrations.haystack` -- ``AnygrainRetriever``, a Haystack component
  (the ``haystack`` extra)

Each module imports its framework at the top, so ``import anygrain`` imports none of
them: nothing outside this package imports it (``tests/test_layering.py``).  All of them
search through :class:`~anygrain.serve.service.SearchService` (:func:`.service.shared_service`):
one service per index, whose worker threads keep the tokenizer and BM25 to one thread
each, so concurrent calls (an agent's parallel tool calls, async chains) never collide.
"""
