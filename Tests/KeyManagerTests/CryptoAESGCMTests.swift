import KeyManager
import XCTest

final class CryptoAESGCMTests: XCTestCase {
    private let aad = Array("user_keys|private_key|kid-1|user-1".utf8)

    func testRoundTripAndFormat() throws {
        let key = try SecretBytes.random(count: 32)
        let plaintext = SecretBytes(utf8: "a private key, say")
        let sealed = try AESGCM.seal(plaintext, key: key, aad: aad)
        XCTAssertEqual(sealed.count, 1 + 12 + plaintext.count + 16)
        XCTAssertEqual(sealed.first, 0x01)
        XCTAssertEqual(try AESGCM.open(sealed, key: key, aad: aad), plaintext)
        // Empty plaintext and empty AAD work too.
        let empty = try AESGCM.seal(SecretBytes([]), key: key, aad: [])
        XCTAssertEqual(empty.count, 29)
        XCTAssertEqual(try AESGCM.open(empty, key: key, aad: []).count, 0)
    }

    func testTwoSealsOfTheSameValueDiffer() throws {
        let key = try SecretBytes.random(count: 32)
        let plaintext = SecretBytes(utf8: "same")
        let first = try AESGCM.seal(plaintext, key: key, aad: aad)
        let second = try AESGCM.seal(plaintext, key: key, aad: aad)
        XCTAssertNotEqual(first, second)
        XCTAssertNotEqual(Array(first[1..<13]), Array(second[1..<13]), "nonces must be fresh")
    }

    func testWrongAADWrongKeyTamperingAndTruncationFailToOpen() throws {
        let key = try SecretBytes.random(count: 32)
        let sealed = try AESGCM.seal(SecretBytes(utf8: "secret"), key: key, aad: aad)
        var cases: [(String, () throws -> SecretBytes)] = [
            ("wrong AAD", { try AESGCM.open(sealed, key: key, aad: Array("user_keys|private_key|kid-2|user-1".utf8)) }),
            ("missing AAD", { try AESGCM.open(sealed, key: key, aad: []) }),
            ("wrong key", { try AESGCM.open(sealed, key: try SecretBytes.random(count: 32), aad: self.aad) }),
            ("truncated by one", { try AESGCM.open(Array(sealed.dropLast()), key: key, aad: self.aad) }),
            ("tag only", { try AESGCM.open(Array(sealed.prefix(13)), key: key, aad: self.aad) }),
            ("empty", { try AESGCM.open([], key: key, aad: self.aad) }),
        ]
        for index in sealed.indices {
            var tampered = sealed
            tampered[index] ^= 0x01
            cases.append(("byte \(index) flipped", { try AESGCM.open(tampered, key: key, aad: self.aad) }))
        }
        for (name, open) in cases {
            XCTAssertThrowsError(try open(), name) { error in
                XCTAssertTrue(error is AESGCM.OpenFailure, "\(name): \(error)")
                XCTAssertEqual((error as? any KeymgrFailure)?.code, .failure)
                XCTAssertEqual((error as? any KeymgrFailure)?.message, AESGCM.openFailedMessage)
            }
        }
    }

    func testKeyMustBe32BytesAndThatIsNotAnOpenFailure() throws {
        XCTAssertThrowsError(try AESGCM.seal(SecretBytes([1]), key: SecretBytes([UInt8](repeating: 0, count: 16)), aad: [])) {
            XCTAssertEqual(($0 as? KeyManagerError)?.code, .failure)
            XCTAssertFalse($0 is AESGCM.OpenFailure)
        }
        let lookalike: any Error = KeyManagerError(.badInput, AESGCM.openFailedMessage)
        XCTAssertFalse(lookalike is AESGCM.OpenFailure)
    }
}
