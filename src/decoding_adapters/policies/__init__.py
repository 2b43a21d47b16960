"""The adapters' policies (sequence and token), their choosers, save/load and model cards.

Importing the package registers the adapter kinds (``kinds``), one module each, so that
``adapter.json``'s ``kind`` is found whatever submodule is imported first."""

# isort: off  (registration order is the order the kinds are listed in)
from . import kind_draft, kind_sequence, kind_token  # noqa: F401
# isort: on
