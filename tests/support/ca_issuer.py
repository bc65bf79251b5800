"""A loopback stand-in for the "CA Issuers" hosts (Microsoft's, DigiCert's) that publish the
intermediate certificates named in attested documents."""

from __future__ import annotations

import http.server

from se_forwarder.simulator.attestation import AttestationAuthority


class Issuer(http.server.ThreadingHTTPServer):
    """Serves one certificate at /ca.crt, a 404 elsewhere, a redirect at /moved.crt; counts requests."""

    def __init__(self) -> None:
        self.body, self.requests, self.location = b"", 0, ""
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                outer.requests += 1
                if self.path == "/moved.crt":
                    self.send_response(302)
                    self.send_header("Location", outer.location)
                    self.end_headers()
                    return
                found = self.path == "/ca.crt"
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/pkix-cert")
                self.end_headers()
                self.wfile.write(outer.body if found else b"")

            def log_message(self, *_args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def url(self, path: str = "/ca.crt") -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


def azure_like(issuer: Issuer, path: str = "/ca.crt") -> AttestationAuthority:
    """A signing authority whose certificates name ``issuer``'s ``path`` as their "CA Issuers" URL,
    as Azure's do, and the intermediate served there."""
    authority = AttestationAuthority(issuer_url=issuer.url(path))
    issuer.body = authority.intermediate_der
    return authority
