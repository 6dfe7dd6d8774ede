"""seq2seq-serve's page (`GET /`) in a headless Chromium, against real servers on loopback over the
multilingual test model (en -> de, en -> fr, de -> en): each control driven as a user drives it, and
what the page shows compared with what the server's routes answer for the same request (the page
shows what the API returns). One browser for the module; the page is loaded afresh in each test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_serve import Server

pytest.importorskip("selenium", reason="the dev extra installs selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (BROWSER and DRIVER),
    reason="no chromium/chromedriver: apt-get install -y chromium chromium-driver (CI installs them)",
)
KEY = "page-t3st-key"
EN = "en1 en2 en3\nen7 en0 en4 en4"  # two lines: the page sends them as one text, as LibreTranslate's page does
DOCS_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "img"
DESKTOP, PHONE = (1280, 800), (390, 844)


@pytest.fixture(scope="module")
def plain(multilingual_run) -> Iterator[Server]:
    """No keys; 40 characters a line and 6 lines a request, so the counter's limits are met quickly."""
    running = Server(f"run={multilingual_run.path}", "max_line_chars=40", "max_request_lines=6")
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def keyed(multilingual_run, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    keys = tmp_path_factory.mktemp("page-keys") / "keys.txt"
    keys.write_text(f"{KEY}\n")
    running = Server(f"run={multilingual_run.path}", f"api_keys_file={keys}")
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def chrome(plain: Server, keyed: Server) -> Iterator[webdriver.Chrome]:
    """Started after the servers, so that it quits (closing its keep-alive connections) before they stop."""
    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def viewport(driver: webdriver.Chrome, size: tuple[int, int]) -> None:
    """The page's viewport exactly `size` (a phone's: mobile, so its viewport meta applies)."""
    width, height = size
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def opened(
    driver: webdriver.Chrome, server: Server, size: tuple[int, int] = DESKTOP, fresh: bool = True
) -> WebDriverWait:
    """The page loaded; `fresh`: with nothing kept from an earlier test (the key, alternatives on)."""
    viewport(driver, size)
    if fresh:
        driver.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": server.url, "storageTypes": "local_storage"})
    driver.get(server.url)
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    return wait


def el(driver: webdriver.Chrome, element_id: str):
    return driver.find_element(By.ID, element_id)


def translated(driver: webdriver.Chrome, wait: WebDriverWait) -> list[str]:
    """The output's lines once the page has an answer (not busy, the placeholder gone)."""
    wait.until(
        lambda d: (
            el(d, "output").get_attribute("aria-busy") == "false" and d.find_elements(By.CSS_SELECTOR, "#output .line")
        )
    )
    return [line.text for line in driver.find_elements(By.CSS_SELECTOR, "#output .line")]


def watch(driver: webdriver.Chrome, element_id: str) -> None:
    """Records each text the element shows from now on (a spinner's line may come and go between
    two looks), for `seen`."""
    driver.execute_script(
        """const element = document.getElementById(arguments[0]);
        window.seen = window.seen || {};
        window.seen[arguments[0]] = [];
        new MutationObserver(() => window.seen[arguments[0]].push(element.textContent))
          .observe(element, {childList: true, subtree: true, characterData: true});""",
        element_id,
    )


def seen(driver: webdriver.Chrome, element_id: str) -> list[str]:
    return driver.execute_script("return window.seen[arguments[0]]", element_id)


def values(select) -> list[str]:
    return [option.get_attribute("value") for option in Select(select).options]


def expected(server: Server, text: str, source: str, target: str, **extra: object) -> dict:
    answer = server.post("/translate", {"q": text, "source": source, "target": target, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_languages_translate_alternatives_copy_swap_detect_and_attention(
    plain: Server, chrome, multilingual_run
) -> None:
    wait = opened(chrome, plain)
    header = chrome.find_element(By.TAG_NAME, "header").text
    assert str(multilingual_run.path) in header and "CTranslate2" in header
    assert not el(chrome, "key-row").is_displayed()  # no keys on this server
    # The sources are the languages with a target (fr has none); each source's targets are /languages'.
    assert values(el(chrome, "source-lang")) == ["auto", "en", "de"]
    assert Select(el(chrome, "source-lang")).first_selected_option.text == "English"  # /frontend/settings' source
    assert values(el(chrome, "target-lang")) == ["de", "fr"]
    Select(el(chrome, "target-lang")).select_by_visible_text("German")
    # Every field has a label; Tab goes through the controls in reading order.
    unlabelled = "return [...document.querySelectorAll('input, select, textarea')].filter(e => !e.labels.length)"
    assert chrome.execute_script(unlabelled) == []
    chrome.execute_script("arguments[0].focus()", el(chrome, "source-lang"))
    order = []
    for _ in range(4):
        chrome.switch_to.active_element.send_keys(Keys.TAB)
        order.append(chrome.switch_to.active_element.get_attribute("id"))
    assert order == ["swap", "target-lang", "source", "translate"]

    # Typed, then Ctrl+Enter: the translation /translate answers for the text, a spinner meanwhile.
    watch(chrome, "status")
    el(chrome, "source").send_keys(EN)
    el(chrome, "source").send_keys(Keys.CONTROL, Keys.ENTER)
    assert translated(chrome, wait) == expected(plain, EN, "en", "de")["translatedText"].split("\n")
    assert "Translating…" in seen(chrome, "status")
    assert not el(chrome, "alternatives-box").is_displayed()  # not asked for: PyTorch's to load
    # Alternatives asked for: the text again, with those /translate answers.
    el(chrome, "want-alternatives").click()
    answer = expected(plain, EN, "en", "de", alternatives=3)
    wait.until(lambda d: el(d, "alternatives-box").is_displayed())
    assert translated(chrome, wait) == answer["translatedText"].split("\n")
    shown = [b.text for b in chrome.find_elements(By.CSS_SELECTOR, "#alternatives button")]
    assert shown == answer["alternatives"] and shown, "the alternatives are shown as the API answers them"
    # An alternative chosen becomes the translation; the translation takes its place in the list.
    chrome.find_elements(By.CSS_SELECTOR, "#alternatives button")[0].click()
    assert translated(chrome, wait) == answer["alternatives"][0].split("\n")
    assert chrome.find_elements(By.CSS_SELECTOR, "#alternatives button")[0].text == answer["translatedText"]

    # Copy puts the translation shown on the clipboard.
    chrome.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": plain.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    el(chrome, "copy").click()
    wait.until(lambda d: el(d, "copy").text == "Copied")
    clipboard = chrome.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], e => arguments[0]('failed: ' + e))"
    )
    assert clipboard == answer["alternatives"][0]

    # Swap: de -> en, the translation becomes the text, translated back.
    el(chrome, "swap").click()
    assert Select(el(chrome, "source-lang")).first_selected_option.get_attribute("value") == "de"
    assert Select(el(chrome, "target-lang")).first_selected_option.get_attribute("value") == "en"
    assert el(chrome, "source").get_attribute("value") == answer["alternatives"][0]
    back = expected(plain, answer["alternatives"][0], "de", "en")
    wait.until(lambda d: translated(d, wait) == back["translatedText"].split("\n"))

    # Auto-detect: the detected language is shown, and swap is possible from it.
    Select(el(chrome, "source-lang")).select_by_value("auto")
    assert values(el(chrome, "target-lang")) == ["de", "fr", "en"]  # every source's targets
    el(chrome, "source").clear()
    el(chrome, "source").send_keys("de5 de1 de2")
    el(chrome, "translate").click()
    auto = expected(plain, "de5 de1 de2", "auto", "en")
    wait.until(lambda d: translated(d, wait) == [auto["translatedText"]])
    name = {"de": "German", "en": "English"}[auto["detectedLanguage"]["language"]]
    assert el(chrome, "detected").text.startswith(f"Detected: {name} (")
    assert Select(el(chrome, "source-lang")).first_selected_option.text == f"Auto-detect ({name})"

    # A line of the translation, by keyboard: a loading line while it comes, then the heat map
    # /v1/attention answers.
    watch(chrome, "attention-status")
    chrome.find_elements(By.CSS_SELECTOR, "#output .line")[0].send_keys(Keys.ENTER)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#heatmap tbody tr"))
    assert any(text.startswith("Loading the attention map") for text in seen(chrome, "attention-status"))
    source = auto["detectedLanguage"]["language"]
    attention = plain.post("/v1/attention", {"q": "de5 de1 de2", "source": source, "target": "en"}).json()
    assert len(chrome.find_elements(By.CSS_SELECTOR, "#heatmap tbody tr")) == len(attention["output"])
    assert len(chrome.find_elements(By.CSS_SELECTOR, "#heatmap thead th")) == len(attention["source"]) + 1
    assert el(chrome, "attention-status").text == "" and el(chrome, "error").text == ""


def test_the_character_count_holds_each_line_to_the_servers_limit(plain: Server, chrome) -> None:
    wait = opened(chrome, plain)
    assert el(chrome, "char-count").text == "0 / 40 characters"  # /frontend/settings' charLimit
    el(chrome, "source").send_keys("en1 " * 9 + "en1")  # 39 characters
    assert el(chrome, "char-count").text == "39 / 40 characters"
    el(chrome, "source").send_keys("2")
    assert "over" not in el(chrome, "char-count").get_attribute("class")
    el(chrome, "source").send_keys("3")
    assert el(chrome, "char-count").text == "line 1: 41 / 40 characters, over the server's limit a line"
    assert "over" in el(chrome, "char-count").get_attribute("class") and not el(chrome, "translate").is_enabled()
    el(chrome, "source").send_keys(Keys.BACKSPACE, Keys.ENTER, "en2")
    assert (
        el(chrome, "char-count").text == "2 lines, the longest 40 / 40 characters"
        and el(chrome, "translate").is_enabled()
    )
    el(chrome, "source").send_keys("\nen3" * 5)  # 7 lines: one more than max_request_lines
    assert el(chrome, "char-count").text == "7 / 6 lines, over the server's limit"
    el(chrome, "source").send_keys(Keys.BACKSPACE * 4)
    # Not clicked: typing translates after a pause, as LibreTranslate's page does.
    text = el(chrome, "source").get_attribute("value")
    assert translated(chrome, wait) == expected(plain, text, "en", "de")["translatedText"].split("\n")


def test_a_file_is_translated_and_offered_for_download(plain: Server, chrome, tmp_path: Path) -> None:
    wait = opened(chrome, plain)
    el(chrome, "translate-file").click()
    assert el(chrome, "file-error").text == "Choose a file to translate first."
    assert el(chrome, "file").get_attribute("accept") == ".txt,.html,.srt,.docx"
    # A format the server does not take: its error, in the page.
    (tmp_path / "notes.pdf").write_bytes(b"%PDF-1.4")
    el(chrome, "file").send_keys(str(tmp_path / "notes.pdf"))
    el(chrome, "translate-file").click()
    wait.until(lambda d: el(d, "file-error").text)
    assert el(chrome, "file-error").text.startswith("Invalid request: file format not supported; file 'notes.pdf'")
    lines = ["en1 en2 en3", "en7 en0 en4 en4", "en5"]
    (tmp_path / "notes.txt").write_text("\n".join(lines) + "\n")
    Select(el(chrome, "target-lang")).select_by_value("fr")
    el(chrome, "file").send_keys(str(tmp_path / "notes.txt"))
    assert el(chrome, "file-error").text == ""
    el(chrome, "translate-file").click()
    wait.until(lambda d: el(d, "download").is_displayed())
    link = el(chrome, "download")
    assert link.text == "Download notes.txt, translated" and link.get_attribute("download") == "notes.txt"
    downloaded = plain.http.get(link.get_attribute("href"))
    french = plain.post("/translate", {"q": lines, "source": "en", "target": "fr"}).json()["translatedText"]
    assert downloaded.status_code == 200 and downloaded.text == "".join(line + "\n" for line in french)


def test_a_key_is_asked_for_sent_and_kept_where_the_server_requires_one(keyed: Server, chrome, tmp_path) -> None:
    wait = opened(chrome, keyed)
    assert el(chrome, "key-row").is_displayed()
    assert chrome.switch_to.active_element.get_attribute("id") == "api-key"  # nothing translates without it
    el(chrome, "source").send_keys("en1 en2 en3")
    el(chrome, "translate").click()
    wait.until(lambda d: el(d, "error").text)
    assert el(chrome, "error").text == "Please contact the server operator to get an API key"  # the server's 403
    el(chrome, "api-key").send_keys("wrong")
    el(chrome, "translate").click()
    wait.until(lambda d: el(d, "error").text == "Invalid API key")
    assert chrome.find_elements(By.CSS_SELECTOR, "#output .line") == []  # no translation left from before
    el(chrome, "api-key").clear()
    el(chrome, "api-key").send_keys(KEY)
    el(chrome, "translate").click()
    answer = expected(keyed, "en1 en2 en3", "en", "de", api_key=KEY)
    assert translated(chrome, wait) == [answer["translatedText"]] and el(chrome, "error").text == ""
    # Kept in this browser: a reload still sends it, with a file too (a form, not JSON).
    wait = opened(chrome, keyed, fresh=False)
    assert el(chrome, "api-key").get_attribute("value") == KEY
    (tmp_path / "one.txt").write_text("en1 en2 en3\n")
    el(chrome, "file").send_keys(str(tmp_path / "one.txt"))
    el(chrome, "translate-file").click()
    wait.until(lambda d: el(d, "download").is_displayed() or el(d, "file-error").text)
    assert el(chrome, "file-error").text == ""
    assert keyed.http.get(el(chrome, "download").get_attribute("href")).text == answer["translatedText"] + "\n"


def test_the_page_fits_a_desktop_and_a_phone(plain: Server, chrome, tmp_path: Path) -> None:
    """Side by side at 1280x800, one above the other at 390x844, and never wider than the screen;
    SEQ2SEQ_DOCS_SCREENSHOT=1 writes the pictures docs/serve.md shows."""
    for name, size in (("serve-desktop.png", DESKTOP), ("serve-phone.png", PHONE)):
        wait = opened(chrome, plain, size)
        el(chrome, "want-alternatives").click()
        el(chrome, "source").send_keys(EN)
        el(chrome, "source").send_keys(Keys.CONTROL, Keys.ENTER)
        translated(chrome, wait)
        chrome.find_elements(By.CSS_SELECTOR, "#output .line")[0].click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#heatmap tbody tr"))
        width = chrome.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert width[0] == width[1], (name, width)  # nothing sticks out sideways
        source, output = el(chrome, "source").rect, el(chrome, "output").rect
        if size == DESKTOP:
            assert source["y"] == output["y"] and source["x"] + source["width"] < output["x"]
        else:
            assert output["y"] > source["y"] + source["height"] and output["width"] > 0.8 * size[0]
        chrome.save_screenshot(str(tmp_path / name))
        if os.environ.get("SEQ2SEQ_DOCS_SCREENSHOT"):
            from PIL import Image  # matplotlib's dependency

            with Image.open(tmp_path / name) as shot:  # 64 colours: a few tens of KB, text still sharp
                shot.convert("RGB").quantize(64).save(DOCS_IMAGES / name, optimize=True)
