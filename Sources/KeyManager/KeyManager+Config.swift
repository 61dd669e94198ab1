import Foundation
import Storage

/// A setting `keymgr init` chose that `keymgr config set` may change: its name is init's flag without the dashes.
public enum ConfigKey: String, Sendable, CaseIterable {
    case deviceName = "device-name"
    case issuer
    case pinRetry = "pin-retry"
    case pinMinLength = "pin-min-length"
    case argon2Memory = "argon2-memory"
    case argon2Iterations = "argon2-iterations"
    case argon2Parallelism = "argon2-parallelism"
    case biometricVerifier = "biometric-verifier"
    case credentialVerifier = "credential-verifier"
}

/// The store's settings as `init` (and later `config set`) left them.
public struct StoreConfig: Sendable, Equatable {
    public var deviceName: String
    public var issuer: String
    public var pinRetry: Int
    public var pinMinLength: Int
    public var argon2: Argon2Parameters
    public var biometricVerifier: [String]?
    public var credentialVerifier: [String]?

    /// Each setting's value as text, in `ConfigKey` order (a verifier's argv joined by spaces; none: nil).
    public var values: [(key: ConfigKey, value: String?)] {
        ConfigKey.allCases.map { key in
            switch key {
            case .deviceName: (key, deviceName)
            case .issuer: (key, issuer)
            case .pinRetry: (key, String(pinRetry))
            case .pinMinLength: (key, String(pinMinLength))
            case .argon2Memory: (key, String(argon2.memoryKiB))
            case .argon2Iterations: (key, String(argon2.iterations))
            case .argon2Parallelism: (key, String(argon2.parallelism))
            case .biometricVerifier: (key, biometricVerifier?.joined(separator: " "))
            case .credentialVerifier: (key, credentialVerifier?.joined(separator: " "))
            }
        }
    }
}

extension KeyManager {
    /// A verifier command line as argv: split on spaces, empty pieces dropped (as `init` and `config set` take it).
    public static func verifierArgv(_ commandLine: String) -> [String] {
        commandLine.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
    }

    /// The store's settings (the device row, its MAC checked).
    public func config() throws -> StoreConfig {
        StoreConfig(try device())
    }

    /// Changes one setting `init` chose, under the same rules as `init`, audited as `config.changed` and MAC'd with
    /// the device row in one transaction. Argon2 costs only go up (a lower cost would weaken new PINs; an existing
    /// PIN is re-derived under a higher cost at its next unlock, never a lower one). A verifier is removed with the
    /// value `none`.
    /// - Returns: the settings after the change.
    /// - Throws: `usage` for a value the rules refuse (nothing changes).
    @discardableResult
    public func setConfig(_ key: ConfigKey, to text: String) throws -> StoreConfig {
        try write { writer in
            let device = try verifiedDevice(writer)
            var config = StoreConfig(device)
            let before = config
            try Self.apply(key, text, to: &config, current: before)
            var options = InitOptions()
            options.issuer = config.issuer
            options.pinRetry = config.pinRetry
            options.pinMinLength = config.pinMinLength
            options.argon2 = config.argon2
            options.biometricVerifier = config.biometricVerifier
            options.credentialVerifier = config.credentialVerifier
            try Self.validate(options)
            var changed = device
            changed.deviceName = config.deviceName
            changed.issuer = config.issuer
            changed.pinRetry = config.pinRetry
            changed.pinMinLength = config.pinMinLength
            changed.argon2MemoryKib = config.argon2.memoryKiB
            changed.argon2Iterations = config.argon2.iterations
            changed.argon2Parallelism = config.argon2.parallelism
            changed.biometricVerifier = try config.biometricVerifier.map(Self.encodeArgv)
            changed.credentialVerifier = try config.credentialVerifier.map(Self.encodeArgv)
            guard changed != device else { return config }
            try writer.save(changed)
            let old = before.values.first { $0.key == key }?.value
            let new = config.values.first { $0.key == key }?.value
            try writer.appendAudit(auditEvent("config.changed", details: [
                "key": .string(key.rawValue), "from": old.map(JSONValue.string) ?? .null, "to": new.map(JSONValue.string) ?? .null,
            ]))
            return config
        }
    }

    /// `text` parsed as `key`'s value into `config`; `current` holds the values before, for the upward-only rules.
    private static func apply(_ key: ConfigKey, _ text: String, to config: inout StoreConfig, current: StoreConfig) throws {
        func number() throws -> Int {
            guard let value = Int(text.trimmingCharacters(in: .whitespaces)) else {
                throw KeyManagerError(.usage, "\(key.rawValue) needs a whole number, not '\(text)'")
            }
            return value
        }
        func upward(_ value: Int, _ now: Int) throws -> Int {
            guard value >= now else {
                throw KeyManagerError(.usage, "\(key.rawValue) can only go up (now \(now)): a lower Argon2 cost would make new "
                    + "PINs cheaper to guess. To start over with lower costs, make a new store with `keymgr init`")
            }
            return value
        }
        func verifier() throws -> [String]? {
            if text == "none" { return nil }
            let argv = verifierArgv(text)
            guard !argv.isEmpty else { throw KeyManagerError(.usage, "\(key.rawValue) needs a command (or `none` to remove it)") }
            return argv
        }
        switch key {
        case .deviceName:
            try TextRules.checkIdentifier(text, what: "device name")
            config.deviceName = text.trimmingCharacters(in: .whitespaces)
        case .issuer:
            try TextRules.checkIdentifier(text, what: "issuer")
            config.issuer = text
        case .pinRetry: config.pinRetry = try number()
        case .pinMinLength: config.pinMinLength = try number()
        case .argon2Memory: config.argon2.memoryKiB = try upward(try number(), current.argon2.memoryKiB)
        case .argon2Iterations: config.argon2.iterations = try upward(try number(), current.argon2.iterations)
        case .argon2Parallelism: config.argon2.parallelism = try upward(try number(), current.argon2.parallelism)
        case .biometricVerifier: config.biometricVerifier = try verifier()
        case .credentialVerifier: config.credentialVerifier = try verifier()
        }
    }
}

extension StoreConfig {
    init(_ device: DeviceRecord) {
        self.init(deviceName: device.deviceName, issuer: device.issuer, pinRetry: device.pinRetry,
                  pinMinLength: device.pinMinLength,
                  argon2: Argon2Parameters(memoryKiB: device.argon2MemoryKib, iterations: device.argon2Iterations,
                                           parallelism: device.argon2Parallelism),
                  biometricVerifier: device.biometricVerifier.flatMap(KeyManager.decodeArgv),
                  credentialVerifier: device.credentialVerifier.flatMap(KeyManager.decodeArgv))
    }
}

/// How `keymgr export` writes a public key.
public enum PublicKeyFormat: String, Sendable, CaseIterable {
    /// RFC 7517 JSON Web Key.
    case jwk
    /// RFC 7468 `-----BEGIN PUBLIC KEY-----` (SubjectPublicKeyInfo, RFC 5480).
    case pem
}

/// A key's public half, as `keymgr export` prints it.
public struct ExportedPublicKey: Sendable {
    public var kid: String
    public var userId: String
    public var jwk: JWK
    /// The SubjectPublicKeyInfo as PEM.
    public var pem: String
}

extension KeyManager {
    /// The public key of the user's usable key (or of `kid`): never the private one, which stays sealed.
    /// - Throws: `clientNotRegistered` when there is no such key; `usage` when the user has several and no kid.
    public func exportPublicKey(userId: String?, kid: String?) throws -> ExportedPublicKey {
        let selected = try selectKey(userId: userId, kid: kid, statuses: KeyStatus.usable, issuer: nil, verb: "export",
                                     using: false)
        let key = selected.key
        guard let stored = try? JSONDecoder().decode(JWK.self, from: Data(key.publicJwk.utf8)) else {
            throw KeyManagerError(.tampered, "the stored public key of \(key.kid) cannot be read")
        }
        let publicKey = try P256PublicKey(jwk: stored)
        // Only the public members, whatever the stored object held.
        return ExportedPublicKey(kid: key.kid, userId: key.userId, jwk: publicKey.jwk(kid: key.kid), pem: publicKey.pem())
    }
}
