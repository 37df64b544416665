"""`llmgw keys create` puts a key only in a project that exists, and `keys limits --models none` clears the limit,
against a real `llmgw server` through `llmgw ctl`/`llmgw keys` and the admin API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.support.servers import Server


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("places"), "gw")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    for kind, path in (("org", "Acme"), ("team", "Acme/ml"), ("project", "Acme/ml/train"),
                       ("project", "Acme/ml/serve")):
        made = server.ctl("ctl", "tree", "add", kind, path)
        assert made.returncode == 0, made.stderr
    # The company's limit, which a key in a project made by a typo would escape.
    assert server.ctl("keys", "limits", "--scope", "org", "--id", "Acme", "--rpm", "60").returncode == 0
    yield server
    server.stop()


def places(server: Server) -> list[str]:
    tree = server.ctl_json("ctl", "tree")
    return sorted([o["path"] for o in tree] + [t["path"] for o in tree for t in o["teams"]]
                  + [p["path"] for o in tree for t in o["teams"] for p in t["projects"]])


def keys_named(server: Server, name: str) -> list[dict]:
    return [k for k in server.ctl_json("keys", "list") if k["name"] == name]


def test_a_typo_in_the_project_is_refused_naming_the_nearest_and_nothing_is_made(gw):
    before = places(gw)
    refused = gw.ctl("keys", "create", "ci", "--project", "Acme/ml/trian")
    assert refused.returncode == 1, refused.stdout
    assert "there is no project Acme/ml/trian: did you mean Acme/ml/train?" in refused.stderr
    assert "llmgw ctl tree add" in refused.stderr and "--create" in refused.stderr
    assert "sk-llmgw-" not in refused.stdout
    assert places(gw) == before
    assert keys_named(gw, "ci") == []


def test_a_typo_in_the_org_is_refused_naming_the_project_it_was_near(gw):
    refused = gw.ctl("keys", "create", "ci", "--project", "Acme/ml/train".replace("Acme", "Acmee"))
    assert refused.returncode == 1
    assert "there is no project Acmee/ml/train: did you mean Acme/ml/train?" in refused.stderr
    assert "Acmee" not in places(gw)


def test_a_path_near_no_project_is_refused_pointing_at_the_tree(gw):
    refused = gw.ctl("keys", "create", "ci", "--project", "Zeta/qq/xyz")
    assert refused.returncode == 1
    assert "there is no project Zeta/qq/xyz, nor one near it (llmgw ctl tree lists them)" in refused.stderr


def test_the_admin_api_refuses_a_missing_project_with_404_unless_asked_to_create_it(gw):
    token = open(gw.token_file).read().strip()

    def post(doc: dict) -> tuple[int, dict]:
        request = urllib.request.Request(f"http://{gw.admin}/api/v1/keys", method="POST", data=json.dumps(doc).encode(),
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    status, doc = post({"name": "api", "project": "Acme/ml/serv"})
    assert status == 404 and "did you mean Acme/ml/serve?" in json.dumps(doc)
    status, doc = post({"name": "api", "project": "Acme/ops/api", "create": True})
    assert status == 201 and doc["project"] == "Acme/ops/api"


def test_a_key_goes_into_a_project_that_exists_and_create_makes_a_new_one_on_purpose(gw):
    made = gw.ctl_json("keys", "create", "trainer", "--project", "Acme/ml/train")
    assert made["project"] == "Acme/ml/train" and made["key"].startswith("sk-llmgw-")
    made = gw.ctl_json("keys", "create", "newcomer", "--project", "Beta/web/shop", "--create")
    assert made["project"] == "Beta/web/shop"
    assert {"Beta", "Beta/web", "Beta/web/shop"} <= set(places(gw))


def test_models_none_clears_the_models_limit_instead_of_allowing_a_model_named_none(gw):
    narrowed = gw.ctl_json("keys", "limits", "--scope", "project", "--id", "Acme/ml/train", "--models", "sim,qwen")
    assert sorted(narrowed["limits"]["models"]) == ["qwen", "sim"]
    cleared = gw.ctl_json("keys", "limits", "--scope", "project", "--id", "Acme/ml/train", "--models", "none")
    assert cleared["limits"]["models"] is None
    shown = gw.ctl("keys", "limits", "--scope", "project", "--id", "Acme/ml/train")
    assert shown.returncode == 0 and "models" not in shown.stdout.splitlines()[0]
