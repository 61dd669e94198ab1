import Foundation
@testable import KeyManager

/// Verifies ES256 compact JWSs with an implementation that shares no code with keymgr:
/// `Tests/tools/verify_jws.py` (Python 3 and the `cryptography` package), run as a process.
///
/// Use `check` to learn whether a JWS verifies, or `verify` to get its header and claims as the
/// independent verifier parsed them (throws `Rejected` when the signature does not verify).
enum IndependentVerifier {
    /// Header and claims of a JWS whose signature the independent verifier accepted.
    struct Verified: Equatable {
        var header: [String: JSONValue]
        var claims: [String: JSONValue]
    }

    /// What the independent verifier said.
    enum Outcome: Equatable {
        /// The signature verifies; header and claims as parsed by Python's `json`.
        case verified(Verified)
        /// The signature does not verify (the script exited 1).
        case rejected
    }

    /// The signature does not verify.
    struct Rejected: Error {}

    /// The verifier could not judge: malformed input (exit 2), or Python / `cryptography` missing.
    struct ToolFailure: Error, CustomStringConvertible {
        var description: String
    }

    /// `Tests/tools/verify_jws.py`, found relative to this file.
    static var scriptPath: String {
        URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("tools")
            .appendingPathComponent("verify_jws.py")
            .path
    }

    /// Runs the independent verifier on `compact` with the public key `publicJWK`.
    static func check(_ compact: String, publicJWK: JWK) throws -> Outcome {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", scriptPath, publicJWK.jsonObject().canonicalJSON()]
        let input = Pipe()
        let output = Pipe()
        let errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        input.fileHandleForWriting.write(Data(compact.utf8))
        try input.fileHandleForWriting.close()
        let stdout = output.fileHandleForReading.readDataToEndOfFile()
        let stderr = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()

        switch process.terminationStatus {
        case 0:
            struct Printed: Decodable {
                var header: [String: JSONValue]
                var claims: [String: JSONValue]
            }
            let printed = try JSONDecoder().decode(Printed.self, from: stdout)
            return .verified(Verified(header: printed.header, claims: printed.claims))
        case 1:
            return .rejected
        default:
            throw ToolFailure(
                description: "verify_jws.py exited \(process.terminationStatus): "
                    + String(decoding: stderr, as: UTF8.self))
        }
    }

    /// The header and claims of `compact` if the independent verifier accepts its signature under
    /// `publicJWK`; throws `Rejected` if it does not.
    static func verify(_ compact: String, publicJWK: JWK) throws -> Verified {
        switch try check(compact, publicJWK: publicJWK) {
        case .verified(let verified): return verified
        case .rejected: throw Rejected()
        }
    }
}
