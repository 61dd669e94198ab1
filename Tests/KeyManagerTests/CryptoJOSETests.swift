import Foundation
@testable import KeyManager
import Synchronization
import XCTest

/// JWS, JWK and P-256 against the RFCs' own vectors.
final class CryptoJOSETests: XCTestCase {
    // RFC 7515 Appendix A.3 (ES256): the key of A.3.1 and the compact JWS of A.3.1/A.3.2.
    static let a3x = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"
    static let a3y = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
    static let a3d = "jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"
    static let a3Header = "eyJhbGciOiJFUzI1NiJ9"
    static let a3Payload = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
    static let a3Signature = "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
    static var a3Compact: String { a3Header + "." + a3Payload + "." + a3Signature }
    static var a3PublicJWK: JWK { JWK(kty: "EC", crv: "P-256", x: a3x, y: a3y) }

    // RFC 7638 §3.1: the RSA key and its thumbprint.
    static let rfc7638N =
        "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"

    static var a3PrivateKey: P256PrivateKey {
        get throws { try P256PrivateKey(rawRepresentation: SecretBytes(try XCTUnwrap(Base64URL.decode(a3d)))) }
    }

    func testRFC7515A3ExampleVerifies() throws {
        let publicKey = try P256PublicKey(jwk: Self.a3PublicJWK)
        let decoded = try JWS.verify(Self.a3Compact, publicKey: publicKey)
        XCTAssertEqual(decoded.header, ["alg": "ES256"])
        XCTAssertEqual(decoded.claims["iss"], "joe")
        XCTAssertEqual(decoded.claims["exp"], .int(1_300_819_380))
        XCTAssertEqual(decoded.claims["http://example.com/is_root"], true)
        XCTAssertEqual(decoded.signingInput, Array((Self.a3Header + "." + Self.a3Payload).utf8))
        XCTAssertEqual(decoded.signature.count, 64)
    }

    func testRFC7515A3WithAnyFlippedSignatureByteFails() throws {
        let publicKey = try P256PublicKey(jwk: Self.a3PublicJWK)
        let signature = try XCTUnwrap(Base64URL.decode(Self.a3Signature))
        for index in [0, 31, 32, 63] {
            var flipped = signature
            flipped[index] ^= 0x01
            let compact = Self.a3Header + "." + Self.a3Payload + "." + Base64URL.encode(flipped)
            XCTAssertThrowsError(try JWS.verify(compact, publicKey: publicKey)) { error in
                XCTAssertEqual(error as? KeyManagerError, KeyManagerError(.badInput, "JWS signature does not verify"))
            }
        }
        // The same signature over a different payload fails too.
        let otherPayload = Base64URL.encode(Array(#"{"iss":"joe"}"#.utf8))
        XCTAssertThrowsError(
            try JWS.verify(Self.a3Header + "." + otherPayload + "." + Self.a3Signature, publicKey: publicKey))
    }

    func testRFC7515A3PrivateKeyGivesThePublicKeyAndSignsVerifiably() throws {
        let key = try Self.a3PrivateKey
        XCTAssertEqual(Base64URL.encode(key.publicKey.x), Self.a3x)
        XCTAssertEqual(Base64URL.encode(key.publicKey.y), Self.a3y)
        XCTAssertEqual(key.publicKey, try P256PublicKey(jwk: Self.a3PublicJWK))

        // A raw signature over the RFC's own signing input.
        let signingInput = Array((Self.a3Header + "." + Self.a3Payload).utf8)
        let signature = try key.signature(for: signingInput)
        XCTAssertEqual(signature.count, 64)
        XCTAssertTrue(key.publicKey.isValidSignature(signature, for: signingInput))
        XCTAssertFalse(key.publicKey.isValidSignature(signature, for: signingInput + [0x20]))

        // A JWS of the same claims made by JWS.sign.
        let compact = try JWS.sign(
            header: ["alg": "ES256"],
            claims: ["iss": "joe", "exp": 1_300_819_380, "http://example.com/is_root": true], key: key)
        let decoded = try JWS.verify(compact, publicKey: try P256PublicKey(jwk: Self.a3PublicJWK))
        XCTAssertEqual(decoded.claims["iss"], "joe")
        XCTAssertEqual(decoded.claims["exp"], .int(1_300_819_380))
        // Canonical JSON: sorted keys, no whitespace, "/" not escaped.
        XCTAssertEqual(
            Base64URL.decode(String(compact.split(separator: ".")[1])).map { String(decoding: $0, as: UTF8.self) },
            #"{"exp":1300819380,"http://example.com/is_root":true,"iss":"joe"}"#)
    }

    func testRFC7638ThumbprintOfTheRSAExample() throws {
        let jwk = JWK(kty: "RSA", n: Self.rfc7638N, e: "AQAB", alg: "RS256", kid: "2011-04-29")
        XCTAssertEqual(try jwk.thumbprint(), "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs")
        // The same JWK read from JSON, with an unknown member that must not matter.
        let json = #"{"kty":"RSA","n":"\#(Self.rfc7638N)","e":"AQAB","alg":"RS256","kid":"2011-04-29","x5u":"https://x"}"#
        XCTAssertEqual(try JSONDecoder().decode(JWK.self, from: Data(json.utf8)).thumbprint(),
                       "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs")
    }

    func testThumbprintOfAGeneratedKeyAndItsRequiredMembers() throws {
        let key = try P256PrivateKey.generate()
        let jwk = key.publicKey.jwk(kid: "kid-1")
        let thumbprint = try jwk.thumbprint()
        XCTAssertEqual(thumbprint.count, 43)
        XCTAssertNotNil(Base64URL.decode(thumbprint))
        // Only crv, kty, x, y count.
        XCTAssertEqual(try key.publicKey.jwk(kid: nil, use: nil, alg: nil).thumbprint(), thumbprint)
        XCTAssertNotEqual(try P256PrivateKey.generate().publicKey.jwk(kid: "kid-1").thumbprint(), thumbprint)
        // The EC canonical form, checked by hand.
        let canonical = #"{"crv":"P-256","kty":"EC","x":"\#(jwk.x ?? "")","y":"\#(jwk.y ?? "")"}"#
        XCTAssertEqual(thumbprint, Base64URL.encode(SHA256.hash(Array(canonical.utf8))))

        XCTAssertThrowsError(try JWK(kty: "oct").thumbprint()) {
            XCTAssertEqual(($0 as? KeyManagerError)?.code, .badInput)
        }
        XCTAssertThrowsError(try JWK(kty: "EC", crv: "P-256", x: jwk.x).thumbprint()) {
            XCTAssertEqual(($0 as? KeyManagerError)?.code, .badInput)
        }
    }

    func testPublicJWKShape() throws {
        let key = try Self.a3PrivateKey
        let jwk = key.publicKey.jwk(kid: "k1")
        XCTAssertEqual(jwk, JWK(kty: "EC", crv: "P-256", x: Self.a3x, y: Self.a3y, use: "sig", alg: "ES256", kid: "k1"))
        XCTAssertNil(jwk.d)
        XCTAssertEqual(
            jwk.jsonObject().canonicalJSON(),
            #"{"alg":"ES256","crv":"P-256","kid":"k1","kty":"EC","use":"sig","x":"\#(Self.a3x)","y":"\#(Self.a3y)"}"#)
        XCTAssertEqual(try JWK(jsonObject: jwk.jsonObject()), jwk)
        let encoded = String(decoding: try JSONEncoder().encode(jwk), as: UTF8.self)
        XCTAssertFalse(encoded.contains("\"d\""))
        XCTAssertEqual(try JSONDecoder().decode(JWK.self, from: Data(encoded.utf8)), jwk)
    }

    func testGeneratedKeysSignAndVerify() throws {
        let key = try P256PrivateKey.generate()
        let message = Array("challenge".utf8)
        let signature = try key.signature(for: message)
        XCTAssertEqual(signature.count, 64)
        XCTAssertTrue(key.publicKey.isValidSignature(signature, for: message))
        XCTAssertTrue(key.publicKey.isValidSignature(try key.signature(for: []), for: []))
        XCTAssertFalse(key.publicKey.isValidSignature(signature, for: Array("challengf".utf8)))
        XCTAssertFalse(try P256PrivateKey.generate().publicKey.isValidSignature(signature, for: message))
        XCTAssertFalse(key.publicKey.isValidSignature(Array(signature.dropLast()), for: message))
        XCTAssertFalse(key.publicKey.isValidSignature(signature + [0], for: message))
        XCTAssertFalse(key.publicKey.isValidSignature([UInt8](repeating: 0, count: 64), for: message))

        // The raw scalar round-trips to the same key.
        let again = try P256PrivateKey(rawRepresentation: key.rawRepresentation)
        XCTAssertEqual(again.publicKey, key.publicKey)
        XCTAssertEqual(again.rawRepresentation, key.rawRepresentation)
        XCTAssertTrue(key.publicKey.isValidSignature(try again.signature(for: message), for: message))
        XCTAssertNotEqual(try P256PrivateKey.generate().rawRepresentation, key.rawRepresentation)
    }

    /// The OpenSSL key the first signature imports is shared by later signatures, by copies of the value, and by
    /// threads signing at once; each signature is fresh (ECDSA's random nonce) and verifies.
    func testOneKeySignsFromManyThreadsAndItsCopiesOutliveTheOriginal() throws {
        let (copy, made) = try Self.signConcurrently(count: 64)
        XCTAssertEqual(made.count, 64)
        for (message, signature) in made {
            XCTAssertTrue(copy.publicKey.isValidSignature(signature, for: message))
        }
        XCTAssertEqual(Set(made.map(\.signature)).count, 64, "a signature was repeated")
        // The original value is gone; its copy keeps the shared OpenSSL key alive.
        let late = try copy.signature(for: Array("after the original".utf8))
        XCTAssertTrue(copy.publicKey.isValidSignature(late, for: Array("after the original".utf8)))
    }

    /// A key and a copy of it sign `count` messages from several threads; returns the copy and what was signed.
    private static func signConcurrently(count: Int) throws -> (P256PrivateKey, [(message: [UInt8], signature: [UInt8])]) {
        let original = try P256PrivateKey.generate()
        let copy = original
        let results = Mutex<[(message: [UInt8], signature: [UInt8])]>([])
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: count) { index in
            let message = Array("message \(index)".utf8)
            do {
                let signature = try (index.isMultiple(of: 2) ? copy : original).signature(for: message)
                results.withLock { $0.append((message, signature)) }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, [])
        return (copy, results.withLock { $0 })
    }

    func testInvalidKeysAreRefused() throws {
        var offCurveY = try XCTUnwrap(Base64URL.decode(Self.a3y))
        offCurveY[31] ^= 0x01
        let x = try XCTUnwrap(Base64URL.decode(Self.a3x))
        let badPublic: [(String, () throws -> P256PublicKey)] = [
            ("off the curve", { try P256PublicKey(x: x, y: offCurveY) }),
            ("short x", { try P256PublicKey(x: Array(x.dropFirst()), y: offCurveY) }),
            ("all zero", { try P256PublicKey(x: [UInt8](repeating: 0, count: 32), y: [UInt8](repeating: 0, count: 32)) }),
            ("RSA JWK", { try P256PublicKey(jwk: JWK(kty: "RSA", n: Self.rfc7638N, e: "AQAB")) }),
            ("P-384 JWK", { try P256PublicKey(jwk: JWK(kty: "EC", crv: "P-384", x: Self.a3x, y: Self.a3y)) }),
            ("padded x", { try P256PublicKey(jwk: JWK(kty: "EC", crv: "P-256", x: Self.a3x + "=", y: Self.a3y)) }),
            ("no y", { try P256PublicKey(jwk: JWK(kty: "EC", crv: "P-256", x: Self.a3x)) }),
        ]
        for (name, make) in badPublic {
            XCTAssertThrowsError(try make(), name) { XCTAssertEqual(($0 as? KeyManagerError)?.code, .badInput, name) }
        }
        let order = CryptoHex.bytes("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551")
        for (name, scalar) in [
            ("zero", [UInt8](repeating: 0, count: 32)), ("the order", order),
            ("all ones", [UInt8](repeating: 0xFF, count: 32)), ("31 bytes", [UInt8](repeating: 1, count: 31)),
        ] {
            XCTAssertThrowsError(try P256PrivateKey(rawRepresentation: SecretBytes(scalar)), name) {
                XCTAssertEqual(($0 as? KeyManagerError)?.code, .badInput, name)
            }
        }
        var orderMinusOne = order
        orderMinusOne[31] -= 1
        XCTAssertNoThrow(try P256PrivateKey(rawRepresentation: SecretBytes(orderMinusOne)))
    }

    func testMalformedJWSIsBadInput() throws {
        let publicKey = try P256PublicKey(jwk: Self.a3PublicJWK)
        let notJSON = Base64URL.encode(Array("not json".utf8))
        let array = Base64URL.encode(Array("[1]".utf8))
        let noneHeader = Base64URL.encode(Array(#"{"alg":"none"}"#.utf8))
        let critHeader = Base64URL.encode(Array(#"{"alg":"ES256","crit":["exp"]}"#.utf8))
        let inputs = [
            "", "a.b", Self.a3Compact + ".x", Self.a3Header + "." + Self.a3Payload,
            Self.a3Header + "+." + Self.a3Payload + "." + Self.a3Signature,
            notJSON + "." + Self.a3Payload + "." + Self.a3Signature,
            Self.a3Header + "." + array + "." + Self.a3Signature,
            noneHeader + "." + Self.a3Payload + ".",
            critHeader + "." + Self.a3Payload + "." + Self.a3Signature,
            Self.a3Header + "." + Self.a3Payload + ".",
        ]
        for input in inputs {
            XCTAssertThrowsError(try JWS.verify(input, publicKey: publicKey), input) {
                XCTAssertEqual(($0 as? KeyManagerError)?.code, .badInput, input)
            }
        }
        XCTAssertThrowsError(try JWS.decode("a.b")) { XCTAssertEqual(($0 as? KeyManagerError)?.code, .badInput) }
        XCTAssertNoThrow(try JWS.decode(noneHeader + "." + Self.a3Payload + "."))
        XCTAssertThrowsError(try JWS.sign(header: ["alg": "HS256"], claims: [:], key: try Self.a3PrivateKey)) {
            XCTAssertEqual(($0 as? KeyManagerError)?.code, .badInput)
        }
        XCTAssertThrowsError(try JWS.sign(header: [:], claims: [:], key: try Self.a3PrivateKey))
    }

    func testCanonicalJSON() throws {
        let value: JSONValue = [
            "b": 1, "a": [true, .null, "x/y", 1.5, -7], "c": ["z": "\"\\\n\t\u{01}é", "Z": .object([:])], "": [],
        ]
        XCTAssertEqual(
            value.canonicalJSON(),
            #"{"":[],"a":[true,null,"x/y",1.5,-7],"b":1,"c":{"Z":{},"z":"\"\\\n\t\u0001é"}}"#)
        // Parsing the canonical text back gives the same value, and Codable agrees.
        let decoded = try JSONDecoder().decode(JSONValue.self, from: Data(value.canonicalJSON().utf8))
        XCTAssertEqual(decoded, value)
        XCTAssertEqual(try JSONDecoder().decode(JSONValue.self, from: try JSONEncoder().encode(value)), value)
        XCTAssertEqual(value["b"]?.intValue, 1)
        XCTAssertEqual(value["a"]?.arrayValue?.count, 5)
        XCTAssertEqual(value["a"]?.arrayValue?[3].doubleValue, 1.5)
        XCTAssertEqual(value["a"]?.arrayValue?[0].boolValue, true)
        XCTAssertEqual(value["a"]?.arrayValue?[1].isNull, true)
        XCTAssertEqual(value["c"]?["Z"]?.objectValue, [:])
        XCTAssertEqual(value["c"]?["z"]?.stringValue, "\"\\\n\t\u{01}é")
        XCTAssertNil(value["missing"])
        XCTAssertEqual(JSONValue.int(Int64.max).canonicalJSON(), "9223372036854775807")
    }

    /// Canonical JSON goes through keymgr's one JSON writer without `escapingInvisibles`: DEL, C1 and bidi controls
    /// stay as they are, so the bytes signed and hashed are those keymgr always signed (only C0 is escaped).
    func testCanonicalJSONEscapesOnlyC0() {
        let value: JSONValue = ["k\u{202E}": "\u{7F}\u{85}\u{202E}\u{1F}\u{0C}"]
        XCTAssertEqual(value.canonicalJSON(), "{\"k\u{202E}\":\"\u{7F}\u{85}\u{202E}\\u001f\\f\"}")
    }
}
