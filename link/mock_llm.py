#!/usr/bin/env python3
"""An OpenAI-compatible mock for link/order.py: POST /v1/chat/completions
streams a `bash` call (`echo hi`) until the conversation holds three tool
results, then a text answer. Usage: python3 link/mock_llm.py PORT
(MOCK_DELAY=SECONDS waits before each answer)."""
import json, sys, time, os
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
DELAY = float(os.environ.get("MOCK_DELAY", "0"))
def chunk(delta, finish):
    return {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":delta,"finish_reason":finish}]}
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(n))
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        if DELAY: time.sleep(DELAY)
        if done < 3:
            frames = [chunk({"role":"assistant","tool_calls":[{"index":0,"id":f"call_{done}","type":"function","function":{"name":"bash","arguments":""}}]}, None),
                      chunk({"tool_calls":[{"index":0,"function":{"arguments":"{\"command\":"}}]}, None),
                      chunk({"tool_calls":[{"index":0,"function":{"arguments":"\"echo hi\"}"}}]}, None),
                      chunk({}, "tool_calls")]
        else:
            frames = [chunk({"role":"assistant","content":"hi hi"}, None), chunk({"content":" hi"}, None), chunk({}, "stop")]
        frames.append({"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}})
        payloads = [f"data: {json.dumps(f)}\n\n" for f in frames] + ["data: [DONE]\n\n"]
        # Chunked and closed after, like the benches' mock (tests/support).
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        for payload in payloads:
            data = payload.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True


s = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
s.serve_forever()
