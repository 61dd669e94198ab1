#!/usr/bin/env python3
"""Independent ES256 JWS verifier for keymgr's tests (Python `cryptography`, not keymgr's code).

Usage: verify_jws.py JWK_JSON [COMPACT_JWS]
  JWK_JSON     the public key as a JSON object (kty "EC", crv "P-256", x, y), or @FILE to read it from FILE
  COMPACT_JWS  the compact JWS; read from stdin when omitted

Exit 0 and print {"header": ..., "claims": ...} as JSON on stdout when the signature verifies;
exit 1 when it does not; exit 2 when the input is malformed or not ES256 / P-256.
"""
import base64
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

B64URL_ALPHABET = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class Malformed(Exception):
    pass


def b64url_decode(text):
    if not set(text) <= B64URL_ALPHABET or len(text) % 4 == 1:
        raise Malformed("not unpadded base64url: %r" % text[:20])
    decoded = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if base64.urlsafe_b64encode(decoded).decode("ascii").rstrip("=") != text:
        raise Malformed("not canonical base64url (unused bits set): %r" % text[-4:])
    return decoded


def json_object(raw, what):
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise Malformed("%s is not JSON: %s" % (what, error))
    if not isinstance(value, dict):
        raise Malformed("%s is not a JSON object" % what)
    return value


def public_key(jwk):
    if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
        raise Malformed("JWK must be kty EC, crv P-256")
    x = b64url_decode(jwk.get("x", ""))
    y = b64url_decode(jwk.get("y", ""))
    if len(x) != 32 or len(y) != 32:
        raise Malformed("JWK x and y must be 32 bytes")
    numbers = ec.EllipticCurvePublicNumbers(int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1())
    try:
        return numbers.public_key()
    except ValueError as error:
        raise Malformed("JWK is not a point on P-256: %s" % error)


def verify(compact, jwk):
    parts = compact.strip().split(".")
    if len(parts) != 3:
        raise Malformed("a compact JWS has three parts")
    header = json_object(b64url_decode(parts[0]), "header")
    claims = json_object(b64url_decode(parts[1]), "payload")
    signature = b64url_decode(parts[2])
    if header.get("alg") != "ES256":
        raise Malformed("alg is not ES256")
    if len(signature) != 64:
        return None
    r = int.from_bytes(signature[:32], "big")
    s = int.from_bytes(signature[32:], "big")
    signing_input = (parts[0] + "." + parts[1]).encode("ascii")
    try:
        public_key(jwk).verify(encode_dss_signature(r, s), signing_input, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return None
    return {"header": header, "claims": claims}


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    try:
        jwk_text = argv[1]
        if jwk_text.startswith("@"):
            with open(jwk_text[1:], encoding="utf-8") as handle:
                jwk_text = handle.read()
        jwk = json_object(jwk_text.encode("utf-8"), "JWK")
        compact = argv[2] if len(argv) == 3 else sys.stdin.read()
        result = verify(compact, jwk)
    except Malformed as error:
        sys.stderr.write("verify_jws: malformed input: %s\n" % error)
        return 2
    if result is None:
        sys.stderr.write("verify_jws: signature does not verify\n")
        return 1
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
