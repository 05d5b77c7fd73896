"""Issue #24's numbered defects (hostile inputs, part 2), each reproduced and kept fixed.

Every test that touches the store runs on SQLite and PostgreSQL (the `db_url` fixture), against the
real service on 127.0.0.1 or the real CLI.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import requests
from ingest_server import Service
from real_bundles import real_bundles

from regress import bundle as bundle_module
from regress.bundle import BundleError, validate_bundle
from regress.cli import main


def post(service: Service, body: Any, token: str) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return requests.post(f"{service.url}/api/v1/runs", data=data, headers=hdrs, timeout=60)


def real() -> dict[str, Any]:
    return real_bundles()[0]


# ---- 1. an integer literal past Python's 4,300-digit limit is a 400 naming its path ----------


@pytest.mark.parametrize(
    "where", ["run.exit_code", "run.summary.n", "results.0.samples.ms.0", "results.0.params.b"]
)
@pytest.mark.parametrize("sign", ["", "-"])
def test_1_huge_integer_literal_is_400_naming_the_field(service: Service, where: str, sign: str) -> None:
    bundle = real()
    parts: list[Any] = [int(p) if p.isdigit() else p for p in where.split(".")]
    target: Any = bundle
    bundle["results"][0]["samples"]["ms"] = [1.0]
    for part in parts[:-1]:
        target = target.setdefault(part, {}) if isinstance(target, dict) else target[part]
    target[parts[-1]] = "@HUGE@"
    body = json.dumps(bundle).replace('"@HUGE@"', sign + "9" * 5000).encode()
    resp = post(service, body, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert str(parts[-1]) in resp.json()["error"] and "5000 digits" in resp.json()["error"]


def test_1_huge_integer_in_a_bundle_file_is_one_line(tmp_path: Any, db_url: str, capsys: Any) -> None:
    path = tmp_path / "huge.json"
    bundle = real()
    bundle["run"]["exit_code"] = "@HUGE@"
    path.write_text(json.dumps(bundle).replace('"@HUGE@"', "1" * 4301))
    assert main(["import", "--db", db_url, str(path)]) != 0
    err = capsys.readouterr().err
    assert "bundle.run.exit_code" in err and "Traceback" not in err


# ---- 2. a whole float where an integer is stored is refused on both databases -----------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("params.b", 1.0),
        ("params.sq", -0.0),
        ("params.d", 128.0),
        ("run.exit_code", 0.0),
        ("stack.schema_version", 1.0),
    ],
)
def test_2_whole_float_in_an_integer_column_is_400(service: Service, path: str, value: float) -> None:
    bundle = real()
    if path.startswith("params."):
        bundle["results"][0]["params"][path.split(".")[1]] = value
    else:
        section, field = path.split(".")
        bundle[section][field] = value
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert path.split(".")[-1] in resp.json()["error"]
    assert "must be integer" in resp.json()["error"]


def test_2_whole_float_import_is_one_line_not_a_traceback(tmp_path: Any, db_url: str, capsys: Any) -> None:
    bundle = real()
    bundle["results"][0]["params"]["b"] = 1.0
    path = tmp_path / "float.json"
    path.write_text(json.dumps(bundle))
    assert main(["import", "--db", db_url, str(path)]) != 0
    err = capsys.readouterr().err
    assert "params.b" in err and "Traceback" not in err


# ---- 3. NUL in any GET parameter is a 400, never a driver error -------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs?runner=%00",
        "/api/v1/runs?stack=a%00b",
        "/api/v1/runs?status=%00",
        "/api/v1/runs?before=x%00",
        "/api/v1/runs/abc%00def",
        "/api/v1/series?case=%00x&stack=" + "0" * 64,
        "/api/v1/series?case=x&stack=%00",
    ],
)
def test_3_nul_in_get_parameters_is_400(service: Service, path: str) -> None:
    resp = requests.get(service.url + path, timeout=30)
    assert resp.status_code == 400, resp.text
    assert "NUL" in resp.json()["error"]


# ---- 18 (part). repeated keys and Unicode digits in ?limit= ------------------------------------


def test_18_repeated_json_key_is_400_naming_the_object(service: Service) -> None:
    bundle = real()
    text = json.dumps(bundle)
    forged = text.replace('"run": {', '"run": {"id": "aaaaaaaaaaaaaaaaaaaa", ', 1)
    assert forged != text
    resp = post(service, forged.encode(), service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert "bundle.run" in resp.json()["error"] and "'id' twice" in resp.json()["error"]


def test_18_repeated_key_in_a_file() -> None:
    with pytest.raises(BundleError, match=r"bundle\.results\[0\]\.metrics: names the key 'x' twice"):
        bundle = real()
        bundle["results"][0]["metrics"] = {"x": 1}
        text = json.dumps(bundle).replace('"metrics": {"x": 1}', '"metrics": {"x": 1, "x": 2}')
        validate_bundle(bundle_module.loads_bundle(text))


@pytest.mark.parametrize("limit", ["\uff11\uff12", "\u0661", "1" * 5000, "+5", " 5", "0"])
def test_18_limit_takes_ascii_digits_only(service: Service, limit: str) -> None:
    resp = requests.get(f"{service.url}/api/v1/runs", params={"limit": limit}, timeout=30)
    assert resp.status_code == 400, resp.text


def test_committed_bundles_still_valid() -> None:
    for bundle in real_bundles():
        validate_bundle(bundle_module.loads_bundle(json.dumps(copy.deepcopy(bundle))))
