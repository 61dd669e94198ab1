import Foundation
import Storage

/// Where a sealed value lives: the purpose its key is derived for, and the AAD that names its row and column.
///
/// Opening a value with another slot's AAD fails, so a ciphertext copied into another row is useless.
struct SealedSlot: Sendable {
    let purpose: String
    let aad: [UInt8]

    private init(purpose: String, parts: [String]) {
        self.purpose = purpose
        // Length-prefixed so that no choice of ids can make two slots' AAD alike.
        self.aad = Array(parts.map { "\($0.utf8.count):\($0)" }.joined(separator: "|").utf8)
    }

    static func masterCheck(deviceId: String) -> SealedSlot {
        SealedSlot(purpose: "device.master_key_check", parts: ["device", "master_key_check", deviceId])
    }

    /// The TPM lockoutAuth keymgr set at `init --key-backend tpm`.
    static func tpmSecrets(deviceId: String) -> SealedSlot {
        SealedSlot(purpose: "device.tpm_secrets", parts: ["device", "tpm_secrets", deviceId])
    }

    static func privateKey(kid: String, userId: String) -> SealedSlot {
        SealedSlot(purpose: "user_keys.private_key", parts: ["user_keys", "private_key", kid, userId])
    }

    /// The inner, PIN-keyed layer of an APPLICATION_PIN private key.
    static func pinWrappedPrivateKey(kid: String, userId: String) -> SealedSlot {
        SealedSlot(purpose: "user_keys.private_key.pin", parts: ["user_keys", "private_key", "pin", kid, userId])
    }

    static func pinVerifier(kid: String) -> SealedSlot {
        SealedSlot(purpose: "app_pins.verifier", parts: ["app_pins", "verifier", kid])
    }

    static func registrationSecret(_ column: String, userId: String, serverName: String) -> SealedSlot {
        SealedSlot(purpose: "registrations.\(column)", parts: ["registrations", column, userId, serverName])
    }

    static func tokenSecret(_ column: String, userId: String, serverName: String) -> SealedSlot {
        SealedSlot(purpose: "tokens.\(column)", parts: ["tokens", column, userId, serverName])
    }
}

/// Purpose keys derived from the master key (HKDF-SHA256), and sealing under them (AES-256-GCM).
struct KeyHierarchy: Sendable {
    private let master: SecretBytes

    init(master: SecretBytes) {
        self.master = master
    }

    func purposeKey(_ purpose: String) throws -> SecretBytes {
        try HKDF.deriveKey(inputKeyMaterial: master, salt: Array("keymgr".utf8),
                           info: Array("keymgr/v1/\(purpose)".utf8), outputByteCount: 32)
    }

    func seal(_ plaintext: SecretBytes, in slot: SealedSlot) throws -> Data {
        Data(try AESGCM.seal(plaintext, key: try purposeKey(slot.purpose), aad: slot.aad))
    }

    func open(_ sealed: Data, in slot: SealedSlot) throws -> SecretBytes {
        try AESGCM.open([UInt8](sealed), key: try purposeKey(slot.purpose), aad: slot.aad)
    }

    /// An HMAC of an identifier of a secret, for the audit log (as Vault's audit devices do).
    func auditIdentifier(_ value: String) throws -> String {
        Hex.encode(try HMACSHA256.authenticate(Array(value.utf8), key: try purposeKey("audit.identifier")))
    }

    /// The master key check of a store whose every row carries a row MAC: from then on a missing MAC is tampering.
    static let masterCheckPlaintext = SecretBytes(utf8: "keymgr master key check v3")
    /// The check of a store whose gating rows carry MACs but whose rows carry no row MACs yet (schema 2).
    static let v2MasterCheckPlaintext = SecretBytes(utf8: "keymgr master key check v2")
    /// The check of a store made before the MACs (schema 1): opening it stamps every row once (see `stampIfMadeBeforeIntegrity`).
    static let legacyMasterCheckPlaintext = SecretBytes(utf8: "keymgr master key check v1")
}
