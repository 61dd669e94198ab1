#!/usr/bin/env python3
"""Independent DPoP proof (RFC 9449) checker for keymgr's tests (Python `cryptography`, not keymgr's code).

Usage: verify_dpop.py --htm METHOD --htu URL [--nonce N] [--access-token-file F] [--jkt THUMBPRINT] [PROOF]
  The proof is read from stdin when omitted.

Checks: header typ "dpop+jwt", alg ES256, a public P-256 jwk (no private member) that verifies the signature;
claims jti (a string), htm == METHOD, htu == URL without query and fragment, iat within 5 minutes of now,
nonce == N (or absent when no --nonce), ath == base64url(SHA-256(access token)) (or absent when no token),
and the jwk's RFC 7638 thumbprint == THUMBPRINT when given.
Exit 0 and print {"header","claims","jkt"} on stdout when every check passes; 1 when one fails; 2 on bad input.
"""
import argparse
import base64
import hashlib
import json
import os
import sys
import time
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verify_jws  # noqa: E402  (the sibling ES256 verifier)


def b64url(data):
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def thumbprint(jwk):
    canonical = json.dumps({"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"], "y": jwk["y"]},
                           separators=(",", ":"), sort_keys=True)
    return b64url(hashlib.sha256(canonical.encode("utf-8")).digest())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--htm", required=True)
    parser.add_argument("--htu", required=True)
    parser.add_argument("--nonce")
    parser.add_argument("--access-token-file")
    parser.add_argument("--jkt")
    parser.add_argument("proof", nargs="?")
    args = parser.parse_args()
    compact = (args.proof if args.proof is not None else sys.stdin.read()).strip()
    failures = []
    try:
        parts = compact.split(".")
        if len(parts) != 3:
            raise verify_jws.Malformed("a compact JWS has three parts")
        header = verify_jws.json_object(verify_jws.b64url_decode(parts[0]), "header")
        jwk = header.get("jwk")
        if not isinstance(jwk, dict):
            raise verify_jws.Malformed("the header has no jwk object")
        result = verify_jws.verify(compact, jwk)
    except verify_jws.Malformed as error:
        sys.stderr.write("verify_dpop: malformed input: %s\n" % error)
        return 2
    if result is None:
        sys.stderr.write("verify_dpop: signature does not verify with the header's jwk\n")
        return 1
    header, claims = result["header"], result["claims"]
    if header.get("typ") != "dpop+jwt":
        failures.append("typ is %r, not dpop+jwt" % header.get("typ"))
    if "d" in jwk:
        failures.append("the header's jwk carries a private key")
    if not isinstance(claims.get("jti"), str) or not claims["jti"]:
        failures.append("no jti")
    if claims.get("htm") != args.htm:
        failures.append("htm is %r, not %r" % (claims.get("htm"), args.htm))
    split = urlsplit(args.htu)
    expected_htu = urlunsplit((split.scheme, split.netloc, split.path, "", ""))
    if claims.get("htu") != expected_htu:
        failures.append("htu is %r, not %r" % (claims.get("htu"), expected_htu))
    iat = claims.get("iat")
    if not isinstance(iat, int) or abs(time.time() - iat) > 300:
        failures.append("iat %r is not within 5 minutes of now" % iat)
    if claims.get("nonce") != args.nonce:
        failures.append("nonce is %r, not %r" % (claims.get("nonce"), args.nonce))
    expected_ath = None
    if args.access_token_file:
        with open(args.access_token_file, encoding="utf-8") as handle:
            token = handle.read().strip()
        expected_ath = b64url(hashlib.sha256(token.encode("ascii")).digest())
    if claims.get("ath") != expected_ath:
        failures.append("ath is %r, not %r" % (claims.get("ath"), expected_ath))
    jkt = thumbprint(jwk)
    if args.jkt is not None and jkt != args.jkt:
        failures.append("the jwk's thumbprint is %s, not %s" % (jkt, args.jkt))
    if failures:
        sys.stderr.write("verify_dpop: " + "; ".join(failures) + "\n")
        return 1
    json.dump({"header": header, "claims": claims, "jkt": jkt}, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
