"""The adapters' policies (sequence and token), their choosers, save/load and model cards.

Importing the package registers the adapter kinds (``kinds``), one module each, so that
``adapter.json``'s ``kind`` is found whatever submodule is imported first; the order below is the
order the kinds are listed in."""

# isort: off
from . import kind_sequence, kind_token, kind_draft, kind_attempt, kind_rule  # noqa: F401
# isort: on
