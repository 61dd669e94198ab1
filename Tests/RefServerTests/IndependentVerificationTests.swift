import Foundation
import KeyManager
@testable import RefServer
import XCTest

/// The reference server judges keymgr's signatures with code keymgr's signer does not share (`ServerCrypto`, on
/// libcrypto directly), so a bug in keymgr's JOSE code is not accepted by keymgr's own test server.
final class IndependentVerificationTests: XCTestCase {
    private static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// P-256's group order n, big-endian.
    private static let order: [UInt8] = hex("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551")

    /// A signer bug that keymgr's verifier would share (here: `s || r` written instead of `r || s`, and read back the
    /// same way) passes keymgr's own check, and the reference server refuses it, as Python's `cryptography` does.
    func testASignerBugMirroredInKeymgrsVerifierIsRefused() throws {
        let key = try P256PrivateKey.generate()
        let jwk = key.publicKey.jwk(kid: "k1")
        let (signingInput, good) = try signed(["sub": "dave", "challenge": "c1"], key: key)
        let swapped = Array(good[32...] + good[..<32])
        let compact = signingInput + "." + Base64URL.encode(swapped)

        // keymgr's verifier with the same bug (halves read back swapped) accepts what the buggy signer wrote.
        let readBack = Array(swapped[32...] + swapped[..<32])
        XCTAssertTrue(key.publicKey.isValidSignature(readBack, for: Array(signingInput.utf8)))
        // The server's own path does not.
        XCTAssertThrowsError(try ServerJWSVerifier().verify(compact, publicJWK: Self.strings(jwk))) { error in
            XCTAssertEqual((error as? JWSRejection)?.description, "JWS signature does not verify")
        }
        XCTAssertEqual(try Self.python(compact, jwk: jwk), false)
    }

    /// For signatures right and wrong in the ways a signer can get them wrong, the server's verdict is Python
    /// `cryptography`'s (Tests/tools/verify_jws.py), and both verdicts occur.
    func testTheServersVerdictsAreThoseOfAnIndependentVerifier() throws {
        let key = try P256PrivateKey.generate()
        let other = try P256PrivateKey.generate()
        let jwk = key.publicKey.jwk(kid: "k1")
        let (input, signature) = try signed(["sub": "dave", "challenge": "c1", "iat": 1_700_000_000], key: key)
        let (_, foreign) = try signed(["sub": "dave", "challenge": "c1", "iat": 1_700_000_000], key: other)
        let (otherInput, _) = try signed(["sub": "erin", "challenge": "c1", "iat": 1_700_000_000], key: key)
        let r = Array(signature[..<32]), s = Array(signature[32...])
        var flipped = signature
        flipped[63] ^= 0x01
        let cases: [(String, String)] = [
            ("valid", input + "." + Base64URL.encode(signature)),
            ("high s (n - s)", input + "." + Base64URL.encode(r + Self.subtract(Self.order, s))),
            ("halves swapped", input + "." + Base64URL.encode(s + r)),
            ("a bit flipped", input + "." + Base64URL.encode(flipped)),
            ("another key's", input + "." + Base64URL.encode(foreign)),
            ("over another payload", otherInput + "." + Base64URL.encode(signature)),
            ("s zero", input + "." + Base64URL.encode(r + [UInt8](repeating: 0, count: 32))),
            ("r the order", input + "." + Base64URL.encode(Self.order + s)),
            ("r plus the order", input + "." + Base64URL.encode(Self.add(r, Self.order).suffix(32) + s)),
            ("too short", input + "." + Base64URL.encode(Array(signature.prefix(63)))),
        ]
        var verdicts: Set<Bool> = []
        for (name, compact) in cases {
            let server = (try? ServerJWSVerifier().verify(compact, publicJWK: Self.strings(jwk))) != nil
            XCTAssertEqual(server, try Self.python(compact, jwk: jwk), "\(name): the server and cryptography disagree")
            verdicts.insert(server)
        }
        XCTAssertEqual(verdicts, [true, false], "the cases include signatures both accept and both refuse")
    }

    /// A key that is not a point on P-256 verifies nothing, whatever the signature.
    func testAPointOffTheCurveVerifiesNothing() throws {
        let key = try P256PrivateKey.generate()
        var jwk = Self.strings(key.publicKey.jwk(kid: "k1"))
        let (input, signature) = try signed(["sub": "dave"], key: key)
        var y = try XCTUnwrap(Base64URL.decode(try XCTUnwrap(jwk["y"])))
        y[31] ^= 0x01
        jwk["y"] = Base64URL.encode(y)
        XCTAssertThrowsError(try ServerJWSVerifier().verify(input + "." + Base64URL.encode(signature), publicJWK: jwk))
    }

    /// The reference server and the wire clients stand on KeymgrCore: neither imports KeyManager (its store, its
    /// signer), and the server names none of keymgr's signing or verifying types.
    func testTheServerAndTheWireClientsDoNotImportKeyManager() throws {
        for module in ["RefServer", "ServerClients"] {
            let root = Self.repository.appendingPathComponent("Sources/\(module)")
            let enumerator = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)
            var checked = 0
            while let url = enumerator?.nextObject() as? URL {
                guard url.pathExtension == "swift" else { continue }
                checked += 1
                // Code only: the doc comments name keymgr's types to say they are not used.
                let text = try String(contentsOf: url, encoding: .utf8).split(separator: "\n")
                    .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
                XCTAssertFalse(text.contains("import KeyManager"), "\(module)/\(url.lastPathComponent) imports KeyManager")
                if module == "RefServer" {
                    for name in ["P256PublicKey", "P256PrivateKey", "JWS.verify(", "JWS.sign(", "SHA256.hash", "SecureRandom"] {
                        XCTAssertFalse(text.contains(name), "RefServer/\(url.lastPathComponent) uses keymgr's \(name)")
                    }
                }
            }
            XCTAssertGreaterThan(checked, 5, "found \(module)'s sources at \(root.path)")
        }
    }

    // MARK: - Helpers

    /// The signing input of an ES256 JWS of `claims` and keymgr's signature over it (raw `r || s`).
    private func signed(_ claims: [String: JSONValue], key: P256PrivateKey) throws -> (String, [UInt8]) {
        let compact = try JWS.sign(header: ["alg": "ES256", "typ": "JWS", "kid": "k1"], claims: claims, key: key)
        let parts = compact.split(separator: ".").map(String.init)
        return (parts[0] + "." + parts[1], try XCTUnwrap(Base64URL.decode(parts[2])))
    }

    private static func strings(_ jwk: JWK) -> [String: String] {
        var members: [String: String] = [:]
        for case (let name, .string(let value)) in jwk.jsonObject().objectValue ?? [:] { members[name] = value }
        return members
    }

    /// Python `cryptography`'s verdict (Tests/tools/verify_jws.py): true when it verifies; malformed input is refused.
    private static func python(_ compact: String, jwk: JWK) throws -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", repository.appendingPathComponent("Tests/tools/verify_jws.py").path,
                             jwk.jsonObject().canonicalJSON(), compact]
        let errors = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        try process.run()
        let stderr = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        switch process.terminationStatus {
        case 0: return true
        case 1, 2: return false
        default: throw NSError(domain: "verify_jws", code: Int(process.terminationStatus),
                               userInfo: [NSLocalizedDescriptionKey: String(decoding: stderr, as: UTF8.self)])
        }
    }

    private static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            bytes.append(UInt8(text[index..<next], radix: 16) ?? 0)
            index = next
        }
        return bytes
    }

    /// `a - b` for 32-byte big-endian numbers with a >= b.
    private static func subtract(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var borrow = 0
        for index in stride(from: 31, through: 0, by: -1) {
            var digit = Int(a[index]) - Int(b[index]) - borrow
            borrow = digit < 0 ? 1 : 0
            if digit < 0 { digit += 256 }
            out[index] = UInt8(digit)
        }
        return out
    }

    /// `a + b` for 32-byte big-endian numbers, 33 bytes.
    private static func add(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 33)
        var carry = 0
        for index in stride(from: 31, through: 0, by: -1) {
            let digit = Int(a[index]) + Int(b[index]) + carry
            out[index + 1] = UInt8(digit & 0xFF)
            carry = digit >> 8
        }
        out[0] = UInt8(carry)
        return out
    }
}
