"""The HTML report opened in headless Chromium: every plot is present and decodes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.audit.conftest import AuditRun
from tests.audit.simbackend import SimConfig, run_backend

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.mark.browser
def test_html_report_plots_render_in_headless_chromium(run_audit: AuditRun, tmp_path: Path) -> None:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        if os.environ.get("KVFENCE_REQUIRE_SERVICES") == "1":
            pytest.fail("Chromium and chromedriver are required under `make test` but are not installed")
        pytest.skip("Chromium / chromedriver not installed (run `make system-deps`)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    out = tmp_path / "report"
    with run_backend(SimConfig(max_model_len=2048, over_length="truncate")) as url:
        run_audit("cache-sharing", url, "--samples", "10", "--prompt-tokens", "1000", "--seed", "1", out=out)
        result, _ = run_audit("admission", url, "--seed", "1", out=out)
    assert result.exit_code == 1  # the truncating backend: the report must show a finding

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get((out / "report.html").as_uri())
        assert driver.title == "kvfence audit report"
        images = driver.find_elements(By.TAG_NAME, "img")
        alts = [img.get_attribute("alt") for img in images]
        assert len(images) == 3, alts  # two cache-sharing plots, one admission plot
        for img in images:
            assert img.get_attribute("src").startswith("data:image/png;base64,")
            width = driver.execute_script("return arguments[0].complete ? arguments[0].naturalWidth : 0;", img)
            assert width > 0, img.get_attribute("alt")
        summary = driver.find_element(By.ID, "summary").text
        assert "admission" in summary and "finding" in summary and "cache-sharing" in summary
    finally:
        driver.quit()
