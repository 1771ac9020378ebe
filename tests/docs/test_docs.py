"""The README and the docs site: the README is a short tour whose layout table matches the tree, every
docs page is in the site's nav, the site builds with --strict, and two built pages render in Chromium."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _nav_pages(nav: object) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_nav_pages(item) for item in nav)) if nav else set()
    if isinstance(nav, dict):
        return set().union(*(_nav_pages(value) for value in nav.values()))
    return set()


def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    in_nav = _nav_pages(config["nav"])
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert pages - in_nav == set(), "docs pages missing from mkdocs.yml's nav"
    assert in_nav - pages == set(), "nav entries without a page"


def test_readme_is_a_short_tour() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    first_screen = "\n".join(readme.splitlines()[:30])
    for what in ("make run", "make test", "docs"):
        assert what in first_screen
    for part in ("kvfence serve", "kvfence gateway", "kvfence audit", "kvfence disagg", "from kvfence import"):
        assert part in readme


def _layout_paths() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Layout", 1)[1]
    return re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)


def test_readme_layout_table_matches_the_tree() -> None:
    paths = _layout_paths()
    assert paths, "no layout table in the README"
    missing = [path for path in paths if not (ROOT / path).exists()]
    assert missing == []
    named = " ".join(re.findall(r"^\|.*$", (ROOT / "README.md").read_text().split("## Layout", 1)[1], re.M))
    # every package of kvfence, and every sub-package of its parts, is named in the table
    packages = sorted(p.parent.relative_to(ROOT / "src") for p in (ROOT / "src/kvfence").glob("*/__init__.py"))
    subpackages = sorted(p.parent for p in (ROOT / "src/kvfence").glob("*/*/__init__.py"))
    for package in packages:
        assert f"src/{package}/" in named, package
    for sub in subpackages:
        assert f"`{sub.name}/`" in named, sub


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs is not None, "mkdocs is not installed (it is in the dev extra)"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([mkdocs, "build", "--strict", "--quiet", "--site-dir", str(site)], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return site


def test_site_builds_strict_with_generated_references(built_site: Path) -> None:
    policy = (built_site / "reference/policy/index.html").read_text()
    for model in ("Policy", "BackendConfig", "TenantConfig", "GatewaySettings"):
        assert f'id="{model.lower()}"' in policy, model
    cli = (built_site / "reference/cli/index.html").read_text()
    for command in ("kvfence serve", "kvfence gateway", "kvfence audit all", "kvfence disagg"):
        assert command in cli, command
    metrics = (built_site / "reference/metrics/index.html").read_text()
    assert "kvfence_requests_total" in metrics and "kvfence_gateway_protection_findings_total" in metrics


class _Recorder(http.server.SimpleHTTPRequestHandler):
    missing: list[str]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        if code == 404:
            self.missing.append(self.path)
        super().send_error(code, message, explain)


@pytest.fixture
def site_server(built_site: Path) -> Iterator[tuple[str, list[str]]]:
    missing: list[str] = []
    handler = functools.partial(type("H", (_Recorder,), {"missing": missing}), directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", missing
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.browser
def test_two_built_pages_render_in_headless_chromium(site_server: tuple[str, list[str]], tmp_path: Path) -> None:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        if os.environ.get("KVFENCE_REQUIRE_SERVICES") == "1":
            pytest.fail("Chromium and chromedriver are required under `make test` but are not installed")
        pytest.skip("Chromium / chromedriver not installed (run `make system-deps`)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    base, missing = site_server
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        for path, title, heading in (("/", "kvfence", "kvfence"),
                                     ("/reference/policy/", "Policy file - kvfence", "Policy reference")):
            driver.get(base + path)
            assert driver.title == title
            assert driver.find_element(By.TAG_NAME, "h1").text.strip() == heading
            nav_links = driver.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary a.md-nav__link")
            assert len(nav_links) > 10, "the site's navigation did not render"
            # the theme's stylesheet applied: its header is a sticky bar, not a plain block
            header = driver.find_element(By.CSS_SELECTOR, "header.md-header")
            assert header.value_of_css_property("position") in ("sticky", "fixed")
            assert driver.execute_script("return document.styleSheets.length") >= 1
        assert missing == [], f"assets the pages asked for that are not in the site: {missing}"
    finally:
        driver.quit()
