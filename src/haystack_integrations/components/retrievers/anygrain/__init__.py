"""anygrain's Haystack retriever under Haystack's integrations namespace (the ``haystack``
extra): ``from haystack_integrations.components.retrievers.anygrain import
AnygrainRetriever``.  A pipeline's YAML names it
``haystack_integrations.components.retrievers.anygrain.AnygrainRetriever``, which Haystack's
default deserialization allowlist loads.  The component is defined in
:mod:`anygrain.integrations.haystack`."""

from anygrain.integrations.haystack import AnygrainRetriever

__all__ = ["AnygrainRetriever"]
