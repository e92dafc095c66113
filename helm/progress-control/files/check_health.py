# The check `helm test` runs in the chart's image (python -c): poll every URL until it answers
# 200 or PC_TEST_TIMEOUT_S passes. Runtime URLs get the query token, never the sidecar's, and
# with a token their /health must name the instance: the runtime answers anyone's /health with
# 200, and only a request with the right token with its instance id.
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

deadline = time.monotonic() + float(os.environ.get("PC_TEST_TIMEOUT_S", "120"))
token = os.environ.get("PC_TEST_QUERY_TOKEN", "")
ca_file = os.environ.get("PC_TEST_CA_FILE") or None
context = ssl.create_default_context(cafile=ca_file)
# The sidecars' /readyz and the runtime's /health/live and /health/ready: a 200 is enough.
plain = os.environ.get("PC_TEST_SIDECAR_URLS", "").split()
plain += os.environ.get("PC_TEST_PROBE_URLS", "").split()
pending = dict.fromkeys(plain, False)
pending |= {url: True for url in os.environ.get("PC_TEST_RUNTIME_URLS", "").split()}
bad = [url for url in pending if not url.startswith(("http://", "https://"))]
if bad:
    sys.exit("not an http(s) URL: " + " ".join(bad))
last = {}
while True:
    for url, runtime in list(pending.items()):
        request = urllib.request.Request(url)  # noqa: S310 - http(s) only, checked above
        if runtime and token:
            request.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:  # noqa: S310
                status, body = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, body = error.code, b""
        except OSError as error:
            last[url] = str(error)
            continue
        if status != 200:
            last[url] = "HTTP " + str(status)
        elif runtime and token and "instance_id" not in json.loads(body or b"{}"):
            last[url] = "the token was not accepted"
        else:
            print("ok", url, flush=True)
            del pending[url]
    if not pending or time.monotonic() >= deadline:
        break
    time.sleep(2)
for url in pending:
    print("FAILED", url, last.get(url, ""), flush=True)
sys.exit(1 if pending else 0)
