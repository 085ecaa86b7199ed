"""The verifiers bridge's endpoint lets in only its harness: a raw HTTP client without the key,
with a huge Content-Length or with malformed JSON gets its 4xx, and nothing reaches the episode."""

import http.client
import json
import queue
import threading

from lmgym.compat.verifiers import MAX_BODY, Endpoint


def post(endpoint, body, headers):
    host, port = endpoint.server.server_address
    connection = http.client.HTTPConnection(host, port, timeout=30)
    connection.putrequest("POST", "/v1/chat/completions")
    for name, value in headers.items():
        connection.putheader(name, value)
    connection.endheaders()
    if body:
        connection.send(body)
    response = connection.getresponse()
    status, data = response.status, response.read()
    connection.close()
    return status, data


def test_the_endpoint_refuses_what_is_not_its_harness():
    events = queue.Queue()
    endpoint = Endpoint(events, timeout=30)
    key = {"Authorization": f"Bearer {endpoint.key}"}
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    try:
        length = {"Content-Length": str(len(body))}
        assert post(endpoint, body, length)[0] == 401  # no key
        assert post(endpoint, body, {**length, "Authorization": "Bearer guess"})[0] == 401  # a wrong one
        assert post(endpoint, b"", {**key, "Content-Length": str(2**30)})[0] == 413  # 1 GiB announced, never read
        assert post(endpoint, b"{not json", {**key, "Content-Length": "9"})[0] == 400
        assert post(endpoint, b"[1, 2]", {**key, "Content-Length": "6"})[0] == 400  # JSON, not an object
        assert events.empty()  # none of them reached the episode

        def harness():  # the env's side: answer the one request that gets in
            kind, request, reply = events.get(timeout=30)
            assert kind == "request" and request["messages"][0]["content"] == "hi"
            reply.put("hello")

        threading.Thread(target=harness, daemon=True).start()
        status, data = post(endpoint, body, {**key, **length})
        assert status == 200 and json.loads(data)["choices"][0]["message"]["content"] == "hello"
        assert MAX_BODY < 2**30
    finally:
        endpoint.close()
