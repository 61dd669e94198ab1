import KeyManager
import XCTest

/// Known-answer tests for the hash, MAC and KDF wrappers, and the behaviour of `SecretBytes`.
final class CryptoPrimitiveTests: XCTestCase {
    // FIPS 180-2 Appendix B.1.
    func testSHA256OfABC() {
        XCTAssertEqual(
            CryptoHex.string(SHA256.hash(Array("abc".utf8))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(SHA256.hash("abc".utf8), SHA256.hash(Array("abc".utf8)))
        XCTAssertEqual(
            CryptoHex.string(SHA256.hash([UInt8]())),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    // RFC 4231 §4.3, test case 2.
    func testHMACSHA256RFC4231TestCase2() throws {
        let tag = try HMACSHA256.authenticate(
            Array("what do ya want for nothing?".utf8), key: SecretBytes(utf8: "Jefe"))
        XCTAssertEqual(
            CryptoHex.string(tag), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    func testHMACSHA256WithEmptyKeyAndMessage() throws {
        // HMAC pads the key with zeros, so an empty key equals a key of 64 zero bytes.
        XCTAssertEqual(
            try HMACSHA256.authenticate([], key: SecretBytes([])),
            try HMACSHA256.authenticate([], key: SecretBytes([UInt8](repeating: 0, count: 64))))
    }

    // RFC 5869 Appendix A.1, test case 1.
    func testHKDFRFC5869TestCase1() throws {
        let okm = try HKDF.deriveKey(
            inputKeyMaterial: SecretBytes([UInt8](repeating: 0x0b, count: 22)),
            salt: CryptoHex.bytes("000102030405060708090a0b0c"),
            info: CryptoHex.bytes("f0f1f2f3f4f5f6f7f8f9"),
            outputByteCount: 42)
        XCTAssertEqual(
            CryptoHex.string(okm.bytes),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    }

    // RFC 5869 Appendix A.3, test case 3: empty salt and info.
    func testHKDFRFC5869TestCase3EmptySaltAndInfo() throws {
        let okm = try HKDF.deriveKey(
            inputKeyMaterial: SecretBytes([UInt8](repeating: 0x0b, count: 22)), salt: [], info: [],
            outputByteCount: 42)
        XCTAssertEqual(
            CryptoHex.string(okm.bytes),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")
    }

    func testHKDFRejectsImpossibleLengths() {
        let ikm = SecretBytes([1, 2, 3])
        for count in [0, 255 * 32 + 1] {
            XCTAssertThrowsError(try HKDF.deriveKey(inputKeyMaterial: ikm, salt: [], info: [], outputByteCount: count)) {
                XCTAssertEqual(($0 as? KeyManagerError)?.code, .failure)
            }
        }
    }

    func testSecureRandomGivesFreshBytes() throws {
        let a = try SecureRandom.bytes(count: 32)
        let b = try SecureRandom.bytes(count: 32)
        XCTAssertEqual(a.count, 32)
        XCTAssertNotEqual(a, b)
        XCTAssertEqual(try SecureRandom.bytes(count: 0), [])
        let secret = try SecretBytes.random(count: 32)
        XCTAssertEqual(secret.count, 32)
        XCTAssertNotEqual(secret, try SecretBytes.random(count: 32))
    }

    func testSecretBytesNeverShowsItsContent() {
        let secret = SecretBytes(utf8: "hunter2-PIN")
        let expected = "SecretBytes(<redacted 11 bytes>)"
        XCTAssertEqual(secret.description, expected)
        XCTAssertEqual(secret.debugDescription, expected)
        XCTAssertEqual("\(secret)", expected)
        XCTAssertEqual(String(describing: secret), expected)
        XCTAssertEqual(String(reflecting: secret), expected)
        var dumped = ""
        dump(secret, to: &dumped)
        var dumpedInOptional = ""
        dump([Optional(secret)], to: &dumpedInOptional)
        for shown in [dumped, dumpedInOptional, "\([secret])", String(reflecting: Optional(secret))] {
            XCTAssertTrue(shown.contains("redacted 11 bytes"), shown)
            XCTAssertFalse(shown.contains("hunter2"), shown)
            XCTAssertFalse(shown.contains("104"), shown)  // "h" as a decimal byte
            XCTAssertFalse(shown.contains("0x"), shown)  // no buffer addresses either
        }
    }

    func testSecretBytesEqualityAndConcatenation() {
        let a = SecretBytes([1, 2, 3])
        XCTAssertEqual(a, SecretBytes([1, 2, 3]))
        XCTAssertNotEqual(a, SecretBytes([1, 2, 4]))
        XCTAssertNotEqual(a, SecretBytes([1, 2]))
        XCTAssertNotEqual(a, SecretBytes([1, 2, 3, 0]))
        XCTAssertEqual(SecretBytes([]), SecretBytes([]))
        XCTAssertEqual(a.count, 3)
        XCTAssertEqual(a.bytes, [1, 2, 3])
        XCTAssertEqual(a.withUnsafeBytes { Array($0) }, [1, 2, 3])
        XCTAssertEqual((a + SecretBytes([9, 8])).bytes, [1, 2, 3, 9, 8])
        XCTAssertEqual((SecretBytes([]) + a).bytes, [1, 2, 3])
        XCTAssertEqual(SecretBytes(utf8: "é").bytes, [0xC3, 0xA9])
    }

    func testConstantTimeEquals() {
        XCTAssertTrue(constantTimeEquals([], []))
        XCTAssertTrue(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        XCTAssertFalse(constantTimeEquals([1, 2, 3], [1, 2, 4]))
        XCTAssertFalse(constantTimeEquals([1, 2, 3], [1, 2]))
    }

    func testBase64URL() {
        // RFC 4648 §10 vectors, unpadded, in the URL-safe alphabet.
        let vectors: [(String, String)] = [
            ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ]
        for (plain, encoded) in vectors {
            XCTAssertEqual(Base64URL.encode(Array(plain.utf8)), encoded)
            XCTAssertEqual(Base64URL.decode(encoded), Array(plain.utf8))
        }
        XCTAssertEqual(Base64URL.encode([0xFB, 0xFF, 0xBF]), "-_-_")
        XCTAssertEqual(Base64URL.decode("-_-_"), [0xFB, 0xFF, 0xBF])
        for invalid in ["+/+/", "Zg==", "Zm9v\n", "Z", "Zm9vY", "Zh", "Zm9 v", "Zm9v!"] {
            XCTAssertNil(Base64URL.decode(invalid), invalid)
        }
    }
}
