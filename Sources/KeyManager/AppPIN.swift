import Foundation
import Storage

extension KeyManager {
    /// The most bytes of a PIN or password keymgr reads or tries. The PIN policy allows 64 characters (at most 256
    /// bytes of UTF-8); a longer guess is refused before any attempt is counted.
    public static let maxSecretInputBytes = 1024
}

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
    ///
    /// Works on the PIN's bytes and scalar values, wiped afterwards: the PIN never becomes a Swift `String`.
    func check(_ pin: SecretBytes) throws {
        guard var scalars = pin.withUnsafeBytes({ PINText.scalars(of: $0) }) else {
            throw KeyManagerError(.badInput, "the PIN is not valid UTF-8 text")
        }
        defer {
            for index in scalars.indices { scalars[index] = 0 }
            scalars.removeAll()
        }
        if scalars.count < minLength {
            throw KeyManagerError(.badInput, "the PIN is too short: use at least \(minLength) characters")
        }
        if scalars.count > Self.maxLength {
            throw KeyManagerError(.badInput, "the PIN is too long: use at most \(Self.maxLength) characters")
        }
        if scalars.contains(where: { [0x00, 0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0x2028, 0x2029].contains($0) }) {
            throw KeyManagerError(.badInput, "the PIN contains a line break or NUL: use printable characters")
        }
        if scalars.allSatisfy({ $0 == scalars[0] }) || Self.isBlocked(scalars) || Self.isDigitRun(scalars) {
            throw KeyManagerError(.badInput, "the PIN is too common (repeated, sequential or on the block list): choose another")
        }
    }

    /// Whether the PIN, with ASCII letters lowercased, is on the block list (compared scalar by scalar).
    private static func isBlocked(_ scalars: [UInt32]) -> Bool {
        var lowered = scalars.map { (0x41...0x5A).contains($0) ? $0 + 0x20 : $0 }
        defer { for index in lowered.indices { lowered[index] = 0 } }
        return blockList.contains { $0.unicodeScalars.map(\.value) == lowered }
    }

    /// Ascending or descending runs of consecutive digits, such as 345678 or 98765.
    private static func isDigitRun(_ scalars: [UInt32]) -> Bool {
        guard scalars.count >= 4, scalars.allSatisfy({ (0x30...0x39).contains($0) }) else { return false }
        let digits = scalars.map { Int($0) - 0x30 }
        let steps = zip(digits, digits.dropFirst()).map { ($1 - $0 + 10) % 10 }
        return steps.allSatisfy { $0 == 1 } || steps.allSatisfy { $0 == 9 }
    }
}

/// The secrets one Argon2id evaluation of a PIN yields: the verifier and the key of the PIN layer (software keys), and
/// the authValue a TPM checks (TPM keys, which keep no verifier: only the TPM can tell a right PIN).
///
/// Both derive (HKDF) from the same Argon2id output, so an unlock costs one KDF and nothing more.
struct PINDerivation {
    let verifier: SecretBytes
    let wrappingKey: SecretBytes
    let tpmAuth: SecretBytes

    static let saltLength = 16

    init(pin: SecretBytes, salt: [UInt8], parameters: Argon2Parameters, kid: String) throws {
        let stretched = try Argon2id.derive(password: pin, salt: salt, parameters: parameters, outputByteCount: 32)
        verifier = try HKDF.deriveKey(inputKeyMaterial: stretched, salt: salt,
                                      info: Array("keymgr/v1/pin-verifier|\(kid)".utf8), outputByteCount: 32)
        wrappingKey = try HKDF.deriveKey(inputKeyMaterial: stretched, salt: salt,
                                         info: Array("keymgr/v1/pin-wrap|\(kid)".utf8), outputByteCount: 32)
        tpmAuth = try HKDF.deriveKey(inputKeyMaterial: stretched, salt: salt,
                                     info: Array("keymgr/v1/pin-tpm-auth|\(kid)".utf8), outputByteCount: 32)
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

/// Checks on text that must not become a Swift `String` (a PIN), or that arrived as raw bytes (argv).
public enum PINText {
    /// Whether `bytes` are valid UTF-8 (no overlong forms, surrogates or stray continuation bytes).
    public static func isValidUTF8(_ bytes: some Collection<UInt8>) -> Bool { scalars(of: bytes) != nil }

    /// The Unicode scalar values `bytes` encode, decoded without making a String; nil when not valid UTF-8.
    static func scalars(of bytes: some Collection<UInt8>) -> [UInt32]? {
        var iterator = bytes.makeIterator()
        var parser = Unicode.UTF8.ForwardParser()
        var scalars: [UInt32] = []
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded): scalars.append(Unicode.UTF8.decode(encoded).value)
            case .emptyInput: return scalars
            case .error: return nil
            }
        }
    }
}
