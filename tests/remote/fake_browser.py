"""A headless user's browser for the OAuth tests: Abstract opens it through $BROWSER
(`python fake_browser.py %s`), as webbrowser does with any browser command. It follows the
authorization URL and its redirects with urllib (no proxy), which ends on Abstract's loopback
callback, as a real browser would after the user approved. With FAKE_BROWSER_LOG set it appends
the URL it was given and the outcome there, one line each."""

import os
import sys
import urllib.request

url = sys.argv[1]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
log = os.environ.get("FAKE_BROWSER_LOG")
try:
    with opener.open(url, timeout=30) as resp:
        outcome = f"{resp.status} {resp.url}"
except Exception as e:  # the outcome is what the test looks at
    outcome = f"failed {e}"
if log:
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"{url}\n{outcome}\n")
