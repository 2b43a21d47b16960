"""The example's verifier: any user module with a function (completion, answer[, row]) -> float."""

import re
import unicodedata


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()  # Bogotá -> Bogota
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def score(completion: str, answer: str, row: dict) -> float:
    """1.0 if the completion's first sentence names the capital (or one of the row's aliases)."""
    first = _norm(re.split(r"[.\n]", completion.strip(), maxsplit=1)[0])
    names = [answer, *row.get("aliases", [])]
    return float(any(re.search(rf"\b{re.escape(_norm(n))}\b", first) for n in names if _norm(n)))
