import KeyManager
import XCTest

/// keymgr's JWSs checked by code that shares nothing with it (Python `cryptography`).
final class CryptoIndependentVerifierTests: XCTestCase {
    func testTheVerifierAcceptsTheRFC7515A3Example() throws {
        let verified = try IndependentVerifier.verify(CryptoJOSETests.a3Compact, publicJWK: CryptoJOSETests.a3PublicJWK)
        XCTAssertEqual(verified.header, ["alg": "ES256"])
        XCTAssertEqual(verified.claims["iss"], "joe")
    }

    func testAJWSFromJWSSignVerifiesIndependently() throws {
        let key = try P256PrivateKey.generate()
        let jwk = key.publicKey.jwk(kid: "0d6c7a2e-kid")
        let header: [String: JSONValue] = [
            "typ": "JWS", "alg": "ES256", "kid": "0d6c7a2e-kid", "jwk": jwk.jsonObject(),
        ]
        let claims: [String: JSONValue] = [
            "sub": "user-1", "challenge": "c/h+a=l", "iat": 1_700_000_000, "nbf": 1_700_000_000,
            "exp": 1_700_000_060, "iss": "com.example.app", "platform": "linux", "note": "Grüße \"quoted\"",
        ]
        let compact = try JWS.sign(header: header, claims: claims, key: key)
        let verified = try IndependentVerifier.verify(compact, publicJWK: jwk)
        XCTAssertEqual(verified.header, header)
        XCTAssertEqual(verified.claims, claims)

        // Several signatures, so a padding bug in r or s (a leading zero byte) would show up.
        for index in 0..<8 {
            let signed = try JWS.sign(header: ["alg": "ES256"], claims: ["n": .int(Int64(index))], key: key)
            XCTAssertEqual(try IndependentVerifier.check(signed, publicJWK: jwk).isVerified, true, signed)
        }
    }

    func testATamperedJWSDoesNotVerifyIndependently() throws {
        let key = try P256PrivateKey.generate()
        let jwk = key.publicKey.jwk(kid: nil)
        let compact = try JWS.sign(header: ["alg": "ES256"], claims: ["sub": "alice"], key: key)
        let parts = compact.split(separator: ".").map(String.init)

        var signature = try XCTUnwrap(Base64URL.decode(parts[2]))
        signature[10] ^= 0x80
        let badSignature = parts[0] + "." + parts[1] + "." + Base64URL.encode(signature)
        XCTAssertEqual(try IndependentVerifier.check(badSignature, publicJWK: jwk), .rejected)

        let otherClaims = Base64URL.encode(Array(#"{"sub":"mallory"}"#.utf8))
        XCTAssertEqual(try IndependentVerifier.check(parts[0] + "." + otherClaims + "." + parts[2], publicJWK: jwk), .rejected)

        let otherKey = try P256PrivateKey.generate().publicKey.jwk(kid: nil)
        XCTAssertEqual(try IndependentVerifier.check(compact, publicJWK: otherKey), .rejected)
        XCTAssertThrowsError(try IndependentVerifier.verify(badSignature, publicJWK: jwk)) {
            XCTAssertTrue($0 is IndependentVerifier.Rejected)
        }
    }
}

extension IndependentVerifier.Outcome {
    fileprivate var isVerified: Bool {
        if case .verified = self { return true }
        return false
    }
}
