"""Headless Chromium from Debian's ``chromium`` and ``chromium-driver`` packages, driven by Selenium.

scripts/test installs both packages when they are missing. Nothing is downloaded at run time:
Selenium is given the Debian chromedriver and browser binaries (no Selenium Manager).
"""

from __future__ import annotations

import shutil
from typing import Any

from tests.support.waiting import wait_for

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")


def _first(paths: tuple[str, ...], name: str) -> str:
    for path in paths:
        if shutil.which(path):
            return path
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError(f"{name} is not installed: apt-get install -y chromium chromium-driver "
                       "(scripts/test does it)")


def chrome(width: int = 1500, height: int = 1100) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _first(CHROMIUM, "chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--no-proxy-server", "--disable-extensions",
                "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=_first(DRIVER, "chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    return driver


def console_errors(driver: Any) -> list[str]:
    """Severe messages the page logged (script errors, CSP violations)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"
            and "favicon" not in e["message"]]


def dialog_open(driver: Any, dialog_id: str) -> bool:
    return driver.find_element("id", dialog_id).get_attribute("open") is not None


def give_token(driver: Any, token: str) -> None:
    """Answer the page's token dialog, which its first action opens."""
    wait_for(lambda: dialog_open(driver, "token-dialog"), 10, "the token dialog")
    driver.find_element("id", "token-input").send_keys(token)
    driver.find_element("id", "token-save").click()


def give_reason(driver: Any, reason: str) -> None:
    """Answer the reason dialog every action opens, and confirm."""
    wait_for(lambda: dialog_open(driver, "action-dialog"), 10, "the reason dialog")
    driver.find_element("id", "action-reason").send_keys(reason)
    driver.find_element("id", "action-ok").click()
