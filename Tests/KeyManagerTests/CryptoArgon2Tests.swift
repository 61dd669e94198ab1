import Foundation
@testable import KeyManager
import XCTest

/// Argon2id against the reference `argon2` command-line tool (Debian package `argon2`), run live.
final class CryptoArgon2Tests: XCTestCase {
    private static let cli = "/usr/bin/argon2"

    /// The raw hash the reference CLI prints for `password` and `salt` (the CLI takes the salt as text).
    private func referenceHash(password: String, salt: String, _ parameters: Argon2Parameters, length: Int) throws -> String {
        guard FileManager.default.isExecutableFile(atPath: Self.cli) else {
            throw XCTSkip("\(Self.cli) is not installed (Debian package argon2)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.cli)
        process.arguments = [
            salt, "-id", "-t", String(parameters.iterations), "-k", String(parameters.memoryKiB),
            "-p", String(parameters.parallelism), "-l", String(length), "-r",
        ]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data(password.utf8))
        try input.fileHandleForWriting.close()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
        return String(decoding: printed, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testMatchesTheReferenceCLI() throws {
        let cases: [(String, String, Argon2Parameters, Int)] = [
            ("password", "somesalt", Argon2Parameters(memoryKiB: 64, iterations: 2, parallelism: 1), 32),
            ("1234", "0123456789abcdef", Argon2Parameters(memoryKiB: 256, iterations: 3, parallelism: 2), 32),
            ("7", "saltsalt", Argon2Parameters(memoryKiB: 32, iterations: 1, parallelism: 4), 16),
            (randomText(12), randomText(16), Argon2Parameters(memoryKiB: 128, iterations: 2, parallelism: 4), 64),
        ]
        for (password, salt, parameters, length) in cases {
            let ours = try Argon2id.derive(
                password: SecretBytes(utf8: password), salt: Array(salt.utf8), parameters: parameters,
                outputByteCount: length)
            XCTAssertEqual(ours.count, length)
            XCTAssertEqual(
                CryptoHex.string(ours.bytes), try referenceHash(password: password, salt: salt, parameters, length: length),
                "password \(password), salt \(salt), \(parameters)")
        }
    }

    func testDifferentInputsGiveDifferentKeys() throws {
        let parameters = Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)
        let salt = try SecureRandom.bytes(count: 16)
        let a = try Argon2id.derive(password: SecretBytes(utf8: "1234"), salt: salt, parameters: parameters)
        XCTAssertEqual(a.count, 32)
        XCTAssertEqual(a, try Argon2id.derive(password: SecretBytes(utf8: "1234"), salt: salt, parameters: parameters))
        XCTAssertNotEqual(a, try Argon2id.derive(password: SecretBytes(utf8: "1235"), salt: salt, parameters: parameters))
        XCTAssertNotEqual(
            a, try Argon2id.derive(password: SecretBytes(utf8: "1234"), salt: try SecureRandom.bytes(count: 16),
                                   parameters: parameters))
    }

    func testBadParametersAreReportedWithoutThePassword() {
        let password = SecretBytes(utf8: "correct horse")
        let cases: [(String, [UInt8], Argon2Parameters)] = [
            ("short salt", Array("1234567".utf8), Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)),
            ("too little memory", Array("somesalt".utf8), Argon2Parameters(memoryKiB: 1, iterations: 1, parallelism: 1)),
            ("no passes", Array("somesalt".utf8), Argon2Parameters(memoryKiB: 64, iterations: 0, parallelism: 1)),
            ("negative memory", Array("somesalt".utf8), Argon2Parameters(memoryKiB: -1, iterations: 1, parallelism: 1)),
        ]
        for (name, salt, parameters) in cases {
            XCTAssertThrowsError(try Argon2id.derive(password: password, salt: salt, parameters: parameters), name) {
                let error = $0 as? KeyManagerError
                XCTAssertEqual(error?.code, .badInput, name)
                XCTAssertFalse(error?.message.contains("horse") ?? true, name)
            }
        }
    }

    func testParametersCodableAndDefault() throws {
        let recommended = Argon2Parameters.rfc9106SecondRecommendation
        XCTAssertEqual(recommended, Argon2Parameters(memoryKiB: 65536, iterations: 3, parallelism: 4))
        let json = try JSONEncoder().encode(recommended)
        XCTAssertEqual(try JSONDecoder().decode(Argon2Parameters.self, from: json), recommended)
    }

    private func randomText(_ count: Int) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        return String((0..<count).map { _ in alphabet[Int.random(in: 0..<alphabet.count)] })
    }
}
