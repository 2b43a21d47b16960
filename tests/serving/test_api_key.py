"""The API key: an empty one is refused at start-up (it would turn authentication off), the key is
compared in constant time, and without it ``/health`` says only whether the server is up while
the API's description (``/docs``, ``/redoc``, ``/openapi.json``) is refused like ``/v1/*``."""

from __future__ import annotations

import hmac

import pytest
from fastapi.testclient import TestClient
from test_server import FakeGenerator as _Fake

from decoding_adapters.cli import main
from decoding_adapters.serving import server
from decoding_adapters.serving.server import ServerLimits, create_app

KEY = {"authorization": "Bearer sekret"}


class FakeGenerator(_Fake):
    def describe(self) -> dict:
        return {"kind": self.kind, "base_model": "/private/path/to/the/base-model", "actions": []}


@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_key_is_refused(key):
    with pytest.raises(ValueError, match="API key is empty"):
        create_app(FakeGenerator(), ServerLimits(), api_key=key)


@pytest.mark.parametrize("how", ["option", "environment"])
def test_an_empty_key_is_refused_by_serve_in_one_line(how, monkeypatch, capsys, tmp_path):
    args = ["serve", "--adapter", str(tmp_path / "no-adapter-needed-to-refuse")]
    if how == "option":
        args += ["--api-key", ""]
    else:
        monkeypatch.setenv("DECODING_ADAPTERS_API_KEY", "")
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and "API key is empty" in err and len(err.strip().splitlines()) == 1, err


def test_health_says_only_ok_without_the_key_and_docs_need_it():
    with TestClient(create_app(FakeGenerator(), ServerLimits(), api_key="sekret")) as c:
        assert c.get("/health").json() == {"status": "ok"}  # not the base model's path
        detailed = c.get("/health", headers=KEY).json()
        assert detailed["status"] == "ok" and "stats" in detailed and detailed["base_model"].startswith("/private")
        for page in ("/docs", "/redoc", "/openapi.json"):
            assert c.get(page).status_code == 401, page
            assert c.get(page, headers={"authorization": "Bearer wrong"}).status_code == 401, page
            assert c.get(page, headers=KEY).status_code == 200, page
        assert c.get("/v1/models").status_code == 401
        assert c.get("/v1/models", headers=KEY).status_code == 200


def test_without_a_key_everything_stays_open():
    with TestClient(create_app(FakeGenerator(), ServerLimits())) as c:
        assert "stats" in c.get("/health").json()
        assert c.get("/openapi.json").status_code == 200


def test_the_key_is_compared_in_constant_time(monkeypatch):
    calls = []

    def recording(a, b):
        calls.append((a, b))
        return hmac.compare_digest(a, b)

    monkeypatch.setattr(server, "hmac", type("H", (), {"compare_digest": staticmethod(recording)}), raising=False)
    with TestClient(create_app(FakeGenerator(), ServerLimits(), api_key="sekret")) as c:
        assert c.get("/v1/models", headers={"authorization": "Bearer nope"}).status_code == 401
        assert c.get("/v1/models", headers=KEY).status_code == 200
    assert len(calls) == 2
