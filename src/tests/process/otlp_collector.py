"""A small OTLP/HTTP traces collector for Herald's tests.

Decodes each ExportTraceServiceRequest with the official protobuf messages
(PyPI `opentelemetry-proto`) and appends one JSON line per span to the file
named by the first argument; prints the port it listens on, then serves. With
`--count-only` (the e2e bench's collector) it decodes and counts the spans
without writing them, so that it costs the machine little.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = open(sys.argv[1], "a", buffering=1)
COUNT_ONLY = "--count-only" in sys.argv[2:]
RECEIVED = 0


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class Collector(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        if COUNT_ONLY:
            global RECEIVED
            RECEIVED += sum(
                len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans
            )
            OUT.seek(0)
            OUT.truncate()
            OUT.write(f"{RECEIVED}\n")
            self.answer()
            return
        for resource_spans in request.resource_spans:
            resource = {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    OUT.write(
                        json.dumps(
                            {
                                "service": resource.get("service.name"),
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_span_id": span.parent_span_id.hex(),
                                "name": span.name,
                                "attributes": {kv.key: value_of(kv.value) for kv in span.attributes},
                                "links": [
                                    {"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex()}
                                    for l in span.links
                                ],
                            }
                        )
                        + "\n"
                    )
        self.answer()

    def answer(self):
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
print(server.server_address[1], flush=True)
server.serve_forever()
