import Foundation
import Storage

/// Which PINs a store accepts: long enough, and not on the block list of common values (NIST SP 800-63B rev. 4).
struct PINPolicy: Sendable {
    let minLength: Int
    static let maxLength = 64

    static let blockList: Set<String> = [
        "1234", "4321", "1212", "1122", "6969", "2580", "0852", "1004", "2000", "2001", "1010",
        "12345", "54321", "123456", "654321", "121212", "112233", "123123", "123321", "696969",
        "159753", "147258", "258369", "987654", "123654", "789456", "456789", "102030", "131313",
        "1234567", "7654321", "12345678", "87654321", "123456789", "987654321", "1234567890", "0123456789",
        "password", "passw0rd", "qwerty", "qwertz", "azerty", "abc123", "abcdef", "letmein", "iloveyou",
    ]

    /// Throws `badInput` with what to choose instead when `pin` is too short, too long or too common.
    func check(_ pin: SecretBytes) throws {
        let text = pin.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
        let characters = Array(text)
        if characters.count < minLength {
            throw KeyManagerError(.badInput, "the PIN is too short: use at least \(minLength) characters")
        }
        if characters.count > Self.maxLength {
            throw KeyManagerError(.badInput, "the PIN is too long: use at most \(Self.maxLength) characters")
        }
        if characters.contains(where: { $0.isNewline || $0 == "\0" }) {
            throw KeyManagerError(.badInput, "the PIN contains a line break or NUL: use printable characters")
        }
        if Set(characters).count == 1 || Self.blockList.contains(text.lowercased()) || Self.isDigitRun(characters) {
            throw KeyManagerError(.badInput, "the PIN is too common (repeated, sequential or on the block list): choose another")
        }
    }

    /// Ascending or descending runs of consecutive digits, such as 345678 or 98765.
    private static func isDigitRun(_ characters: [Character]) -> Bool {
        let digits = characters.compactMap(\.wholeNumberValue)
        guard digits.count == characters.count, digits.count >= 4 else { return false }
        let steps = zip(digits, digits.dropFirst()).map { ($1 - $0 + 10) % 10 }
        return steps.allSatisfy { $0 == 1 } || steps.allSatisfy { $0 == 9 }
    }
}

/// The two secrets one Argon2id evaluation of a PIN yields: the verifier and the key of the PIN layer.
///
/// Both derive (HKDF) from the same Argon2id output, so an unlock costs one KDF and nothing more.
struct PINDerivation {
    let verifier: SecretBytes
    let wrappingKey: SecretBytes

    static let saltLength = 16

    init(pin: SecretBytes, salt: [UInt8], parameters: Argon2Parameters, kid: String) throws {
        let stretched = try Argon2id.derive(password: pin, salt: salt, parameters: parameters, outputByteCount: 32)
        verifier = try HKDF.deriveKey(inputKeyMaterial: stretched, salt: salt,
                                      info: Array("keymgr/v1/pin-verifier|\(kid)".utf8), outputByteCount: 32)
        wrappingKey = try HKDF.deriveKey(inputKeyMaterial: stretched, salt: salt,
                                         info: Array("keymgr/v1/pin-wrap|\(kid)".utf8), outputByteCount: 32)
    }
}

extension Argon2Parameters {
    init(_ device: DeviceRecord) {
        self.init(memoryKiB: device.argon2MemoryKib, iterations: device.argon2Iterations,
                  parallelism: device.argon2Parallelism)
    }

    init(_ pin: AppPINRecord) {
        self.init(memoryKiB: pin.argon2MemoryKib, iterations: pin.argon2Iterations, parallelism: pin.argon2Parallelism)
    }
}
