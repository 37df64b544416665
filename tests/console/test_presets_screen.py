"""llmgw's presets on the console's Models screen, against a real control plane in a real terminal."""

from __future__ import annotations

from tests.integration.test_presets_cli import hub, put_gpu_node  # noqa: F401 - the fixture


def test_the_models_screen_shows_each_preset_and_adds_the_one_chosen(server, hub, terminal, capture):
    put_gpu_node(server, "gpu-b", 12)
    for key, value in (("presets.auto", "false"), ("hub.endpoint", hub.url)):
        assert server.ctl("ctl", "config", "set", key, value).returncode == 0
    screen = terminal().start("console", "--admin", server.admin, "--admin-token-file", server.token_file)
    screen.wait_for("Overview")
    screen.keys("2")
    shown = screen.wait_for("Presets", "presets.auto off: only by hand", "sdxl-turbo")
    assert "fits no node  flux-schnell    pictures  1 GPU with 20.0 GB free each" in shown
    assert "fits          sdxl-turbo      pictures  1 GPU with 10.0 GB free each" in shown
    assert "fits on gpu-b; presets.auto is off" in shown

    screen.keys("Down")  # from flux-schnell's row, the first chosen, to sdxl-turbo's
    screen.keys("p")
    screen.wait_for("sdxl-turbo: on demand, version 1", timeout=30)
    shown = screen.wait_for("in catalog    sdxl-turbo")
    capture(screen, "models-presets")

    assert [m["name"] for m in server.ctl_json("ctl", "models")] == ["sdxl-turbo"]
    (entry,) = server.ctl_json("ctl", "audit", "--target", "model:sdxl-turbo")
    assert entry["via"] == "console" and entry["actor"].endswith(" via the console)")
    assert "llmgw ctl model add|serve|scale|stop|start|presets" in shown
