"""People, Guardrails, Settings and the Manual in the console, against a real control plane in a real terminal."""

from __future__ import annotations

from llmgw.control.adminclient import AdminClient


def _console(terminal, server):
    screen = terminal().start("console", "--admin", server.admin, "--admin-token-file", server.token_file)
    screen.wait_for("Overview", "Control planes")
    return screen


def test_a_place_and_a_person_added_on_the_people_screen_are_in_the_tree_and_the_people(server, terminal,
                                                                                        capture):
    screen = _console(terminal, server)
    screen.keys("5")
    screen.wait_for("The tree", "People (", "API keys (")
    screen.keys("n")
    screen.wait_for("Add to the tree")
    screen.keys("BSpace", "BSpace", "BSpace", "BSpace")  # the kind's default, "team"
    screen.type("org")
    screen.keys("Enter")
    screen.type("Initech")
    screen.keys("Enter")
    screen.wait_for("org Initech is made")

    screen.keys("l")
    screen.wait_for("Limits of a place or a key")
    screen.type("Initech")
    screen.keys("Enter")
    screen.type("60")
    screen.keys("F2")
    screen.wait_for("Initech: 60 requests/min")
    screen.wait_for("  Initech                                  60 requests/min")
    screen.keys("l")
    screen.wait_for("Limits of a place or a key")
    screen.type("Nowhere/else")
    screen.keys("Enter", "Enter", "Enter", "Enter")
    screen.type("lots")
    screen.keys("Enter")
    screen.wait_for("there is no Nowhere/else in the tree")
    screen.keys("Escape")
    screen.wait_gone("Limits of a place or a key")

    screen.keys("p")
    screen.wait_for("Add a person")
    screen.type("grace@initech.example")
    screen.keys("Enter")
    screen.type("Grace Hopper")
    screen.keys("F2")
    shown = screen.wait_for("grace@initech.example (Grace Hopper) is added as member", "password, shown once: ")
    password = shown.split("password, shown once: ", 1)[1].split()[0].rstrip("│")
    screen.keys("Enter")
    screen.wait_gone("password, shown once")
    capture(screen, "people")

    assert "Initech" in [o["name"] for o in server.ctl_json("ctl", "tree")]
    people = {p["email"]: p for p in server.ctl_json("people", "list")}
    assert people["grace@initech.example"]["name"] == "Grace Hopper"
    assert len(password) >= 8 and password not in server.output()


def test_a_refused_person_keeps_the_form_open_with_what_was_typed_and_the_refusal_in_it(server, terminal,
                                                                                         capture):
    screen = _console(terminal, server)
    screen.keys("5")
    screen.wait_for("The tree", "People (", "API keys (")
    screen.keys("p")
    screen.wait_for("Add a person")
    screen.type("ada@example.com")
    screen.keys("Enter")
    screen.type("Ada Lovelace")
    screen.keys("Enter")
    screen.keys(*["BSpace"] * len("member"))
    screen.type("boss")
    screen.keys("F2")
    refused = screen.wait_for('"boss" is not a role')
    # Still the form, with every value as it was typed, and the sentence inside it.
    assert "Add a person" in refused
    assert "ada@example.com" in refused and "Ada Lovelace" in refused and "boss" in refused
    capture(screen, "people-refused")
    assert "ada@example.com" not in [p["email"] for p in server.ctl_json("people", "list")]

    # Corrected where it stands (the role still has the focus) and sent again: added once.
    screen.keys(*["BSpace"] * len("boss"))
    screen.type("admin")
    screen.keys("F2")
    screen.wait_for("ada@example.com (Ada Lovelace) is added as admin", "password, shown once: ")
    screen.keys("Enter")
    screen.wait_gone("password, shown once")
    assert [p["role"] for p in server.ctl_json("people", "list") if p["email"] == "ada@example.com"] == ["admin"]


def test_a_setting_is_set_and_a_bad_value_refused_naming_the_key(server, terminal, capture):
    screen = _console(terminal, server)
    screen.keys("7")
    screen.wait_for("The cluster's settings, version")
    screen.keys("s")
    screen.wait_for("Set a key")
    screen.type("router.cache.max_bytes")
    screen.keys("Enter")
    screen.type("lots")
    screen.keys("Enter")
    refused = screen.wait_for('"lots"')
    assert "router.cache.max_bytes" in refused and "Traceback" not in refused
    capture(screen, "settings-refused")
    assert server.ctl_json("ctl", "config", "get", "router.cache.max_bytes")["value"] != "lots"

    # The form is still open with the key typed: only the value is typed again.
    assert "Set a key" in refused
    screen.keys(*["BSpace"] * len("lots"))
    screen.type("64MB")
    screen.keys("Enter")
    screen.wait_for("cluster settings version 2; in force on every control plane within 5 s")
    assert server.ctl_json("ctl", "config", "get", "router.cache.max_bytes")["value"] == "64MB"


def test_the_guardrails_screen_lists_each_policy_and_what_it_checks(server, terminal, capture):
    AdminClient(server.admin, server.token_file).call("POST", "/api/v1/config", {"set": {
        "guard.policies.strict.input.secrets": "block", "guard.policies.strict.output.cards": "redact",
        "guard.default": "[strict]"}})
    screen = _console(terminal, server)
    screen.keys("6")

    shown = screen.wait_for("strict", "prompts: secrets block", "answers: cards redact")
    assert "on every request: strict" in shown
    capture(screen, "guardrails")


def test_the_manual_lists_the_pages_and_opens_one(server, terminal, capture):
    screen = _console(terminal, server)
    screen.keys("8")
    screen.wait_for("accounting.md", "console.md")
    capture(screen, "manual")
    screen.keys("Enter")  # the first page
    screen.wait_for("accounting.md")
    screen.keys("Escape")
    screen.wait_for("accounting.md", "console.md")
