import Foundation
import Storage

/// Where a key's private half lives.
public enum KeyBackendKind: String, Sendable, Codable, CaseIterable {
    /// A P-256 scalar sealed under the master key (and, for APPLICATION_PIN keys, under the PIN).
    case software
    /// A P-256 key made inside a TPM 2.0; the store keeps only its TPM-wrapped blob.
    case tpm
}

/// The backend `init --key-backend` asks for.
public enum KeyBackendChoice: String, Sendable, CaseIterable {
    case software, tpm
    /// The TPM when one answers at the TCTI, else software (`status` says which and why).
    case auto
}

/// A key a backend just made: its public key, a signer for the binding JWS, and the material keymgr seals under the
/// master key (a software key's scalar, or a TPM key's wrapped blob).
struct NewKey {
    let publicKey: P256PublicKey
    let signer: any ES256Signer
    let material: SecretBytes
}

/// A wrong authValue at the TPM: for an APPLICATION_PIN key, a wrong PIN (the TPM counted it).
struct TPMWrongAuth: Error {}

/// The seam between keymgr's key rules and where keys live. Bind, sign, rebind, revoke, PIN change, master rotation
/// and sync see only this; the store records per key which backend made it.
protocol KeyBackend {
    var kind: KeyBackendKind { get }
    /// Makes a key. `pinAuth` is the APPLICATION_PIN authValue (32 bytes derived from Argon2id(PIN)); nil for the
    /// other auth types.
    func makeKey(pinAuth: SecretBytes?) throws -> NewKey
    /// Opens the material for signing. A TPM checks `pinAuth` here (throws `TPMWrongAuth` when it is wrong).
    func signer(for material: SecretBytes, pinAuth: SecretBytes?) throws -> any ES256Signer
    /// The material of the same key, authorised from now on by `newPinAuth` instead of `pinAuth`.
    func changeAuth(_ material: SecretBytes, pinAuth: SecretBytes, newPinAuth: SecretBytes) throws -> SecretBytes
}

/// Today's keys: the P-256 scalar is the material; the PIN layer (AES-GCM under the PIN) is added above.
struct SoftwareKeyBackend: KeyBackend {
    var kind: KeyBackendKind { .software }

    func makeKey(pinAuth: SecretBytes?) throws -> NewKey {
        let key = try P256PrivateKey.generate()
        return NewKey(publicKey: key.publicKey, signer: key, material: key.rawRepresentation)
    }

    func signer(for material: SecretBytes, pinAuth: SecretBytes?) throws -> any ES256Signer {
        try P256PrivateKey(rawRepresentation: material)
    }

    func changeAuth(_ material: SecretBytes, pinAuth: SecretBytes, newPinAuth: SecretBytes) throws -> SecretBytes {
        material
    }
}

/// Keys inside a TPM 2.0 at a pinned TCTI. The material is a format byte, then for NONE and biometric keys (noDA) a
/// random 32-byte authValue, then the TPM-wrapped blob; APPLICATION_PIN keys (DA-protected) keep no authValue: it
/// comes from the PIN each time.
struct TPMKeyBackend: KeyBackend {
    static let defaultTCTI = "device:/dev/tpmrm0"
    private static let storedAuth: UInt8 = 1
    private static let pinAuth: UInt8 = 2

    let tcti: String
    /// The store's rollback counter: a key that will not load on a TPM without it is one of a TPM cleared or
    /// replaced, not a tampered blob. Nil at init (there is no counter yet).
    var counterIndex: UInt32? = nil
    /// The request's scope is limited (a person, not an administrator): a replaced TPM is for an administrator to
    /// recover, and the error says to ask one.
    var limitedScope = false
    var kind: KeyBackendKind { .tpm }

    func makeKey(pinAuth: SecretBytes?) throws -> NewKey {
        let auth = try pinAuth ?? SecretBytes(SecureRandom.bytes(count: 32))
        return try Self.mapped(tcti) {
            let made = try TPMConnection.with(tcti: tcti) {
                try $0.createSigningKey(auth: auth, dictionaryProtected: pinAuth != nil)
            }
            let signer = MappedTPMSigner(key: try TPMSigningKey(tcti: tcti, blob: made.blob, auth: auth), tcti: tcti,
                                         counterIndex: counterIndex, limitedScope: limitedScope)
            let material = pinAuth == nil ? [Self.storedAuth] + auth.bytes + made.blob : [Self.pinAuth] + made.blob
            return NewKey(publicKey: made.publicKey, signer: signer, material: SecretBytes(material))
        }
    }

    func signer(for material: SecretBytes, pinAuth: SecretBytes?) throws -> any ES256Signer {
        let (storedAuth, blob) = try Self.parse(material)
        guard let auth = pinAuth ?? storedAuth, (pinAuth == nil) == (storedAuth != nil) else {
            throw KeyManager.tampered("the TPM key material (its auth type does not match the key)")
        }
        return try Self.mapped(tcti, counterIndex: counterIndex, limitedScope: limitedScope) {
            let signer = MappedTPMSigner(key: try TPMSigningKey(tcti: tcti, blob: blob, auth: auth), tcti: tcti,
                                         counterIndex: counterIndex, limitedScope: limitedScope)
            // The TPM checks the PIN's authValue when the key is used: one throwaway signature tells a wrong PIN now,
            // before keymgr settles its own counter.
            if pinAuth != nil {
                do {
                    _ = try signer.key.signature(for: Array("keymgr pin check".utf8))
                } catch TPMFailure.authFailed {
                    throw TPMWrongAuth()
                }
            }
            return signer
        }
    }

    func changeAuth(_ material: SecretBytes, pinAuth: SecretBytes, newPinAuth: SecretBytes) throws -> SecretBytes {
        let (_, blob) = try Self.parse(material)
        return try Self.mapped(tcti, counterIndex: counterIndex, limitedScope: limitedScope) {
            SecretBytes([Self.pinAuth] + (try TPMConnection.with(tcti: tcti) {
                try $0.changeAuth(blob, oldAuth: pinAuth, newAuth: newPinAuth)
            }))
        }
    }

    private static func parse(_ material: SecretBytes) throws -> (auth: SecretBytes?, blob: [UInt8]) {
        let bytes = material.bytes
        switch bytes.first {
        case storedAuth? where bytes.count > 33: return (SecretBytes(Array(bytes[1..<33])), Array(bytes[33...]))
        case pinAuth? where bytes.count > 1: return (nil, Array(bytes[1...]))
        default: throw KeyManager.tampered("the TPM key material")
        }
    }

    /// TPM failures as keymgr's errors: unreachable 69 naming the TCTI, lockout 77 saying when it lifts, a blob that
    /// will not load `tampered`.
    /// With `counterIndex`, a key that will not load on a TPM that lacks the store's rollback counter is told as a TPM
    /// cleared or replaced (`KeyManager.replacedTPMError`), not as tampering.
    static func mapped<T>(_ tcti: String, counterIndex: UInt32? = nil, limitedScope: Bool = false,
                          _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let failure as TPMFailure {
            if let counterIndex, Self.mayMeanReplaced(failure),
               let replaced = KeyManager.replacedTPMError(tcti: tcti, counterIndex: counterIndex,
                                                                limitedScope: limitedScope) {
                throw replaced
            }
            throw error(failure, tcti: tcti, lockoutState: nil)
        }
    }

    /// A blob that will not load, or an NV index that is not there: what a TPM cleared or replaced answers.
    private static func mayMeanReplaced(_ failure: TPMFailure) -> Bool {
        switch failure {
        case .wontLoad: return true
        case .other(_, let code, _):  // TPM_RC_HANDLE, whichever handle it names
            let low = code & 0xFFFF
            return code >> 16 == 0 && (low & 0x80 != 0 ? low & 0xBF : low) == 0x08B
        default: return false
        }
    }

    static func error(_ failure: TPMFailure, tcti: String, lockoutState: TPMLockoutState?) -> Error {
        switch failure {
        case .unreachable(_, let detail):
            return KeyManagerError(.serverUnavailable, "no TPM answers at TCTI \(tcti) (\(detail)): start the TPM "
                + "(or its resource manager) and try again; this store's keys live in that TPM")
        case .lockout:
            let state = lockoutState ?? (try? TPMConnection.with(tcti: tcti) { try $0.lockoutState() })
            return KeyManagerError(.pinLocked, "the TPM at \(tcti) is in dictionary-attack lockout after too many wrong "
                + "PINs: \(lockoutLift(state)); keys without a PIN keep working, and an administrator can clear it "
                + "with `keymgr tpm reset-lockout`")
        case .authFailed:
            return KeyManager.tampered("a TPM key's authorisation (the TPM refused its authValue)")
        case .wontLoad:
            return KeyManagerError(.tampered, "a key does not load on the TPM at \(tcti): its blob was altered or it "
                + "was made by another TPM (a store copied to another machine); bind the user again on this device")
        case .foreignStorageKey(let handle):
            return KeyManagerError(.config, String(format: "the TPM at %@ holds a persistent key at 0x%08x that is not "
                + "keymgr's storage key: keymgr will not use it; evict it (tpm2_evictcontrol) only if you know it is unused",
                tcti, handle))
        case .other(let operation, let code, let text):
            return KeyManagerError(.failure, String(format: "the TPM at %@ refused %@ (0x%x: %@)", tcti, operation, code, text))
        }
    }

    /// When a lockout lifts: the TPM forgets one failure every `recoveryTime` seconds and leaves lockout below maxTries.
    static func lockoutLift(_ state: TPMLockoutState?) -> String {
        guard let state, state.recoveryTime > 0 else {
            return "it lifts only when an administrator clears it (the TPM's recovery time is 0)"
        }
        let steps = state.failures >= state.maxTries ? state.failures - state.maxTries + 1 : 1
        let seconds = Int(steps) * Int(state.recoveryTime)
        return "it lifts within \(seconds) s (one failure is forgotten every \(state.recoveryTime) s, from "
            + "\(state.failures) of \(state.maxTries))"
    }
}

/// A TPM key whose failures come out as keymgr's errors (the JWS code above signs with it unaware of the TPM).
struct MappedTPMSigner: ES256Signer {
    let key: TPMSigningKey
    let tcti: String
    var counterIndex: UInt32? = nil
    var limitedScope = false
    var publicKey: P256PublicKey { key.publicKey }

    func signature(for message: [UInt8]) throws -> [UInt8] {
        try TPMKeyBackend.mapped(tcti, counterIndex: counterIndex, limitedScope: limitedScope) {
            try key.signature(for: message)
        }
    }
}

extension KeyManager {
    /// The backend that made `key` (the store's TCTI for TPM keys).
    func backend(for key: UserKeyRecord, device: DeviceRecord) throws -> any KeyBackend {
        try backend(named: key.keyBackend, device: device)
    }

    /// The backend new keys of this store use.
    func newKeyBackend(_ device: DeviceRecord) throws -> any KeyBackend {
        try backend(named: device.keyBackend, device: device)
    }

    private func backend(named name: String, device: DeviceRecord) throws -> any KeyBackend {
        switch KeyBackendKind(rawValue: name) {
        case .software?:
            return SoftwareKeyBackend()
        case .tpm?:
            guard let tcti = device.tpmTcti, !tcti.isEmpty else {
                throw Self.tampered("the device settings (a TPM key but no pinned TCTI)")
            }
            return TPMKeyBackend(tcti: tcti, counterIndex: device.tpmCounterIndex.flatMap { UInt32(exactly: $0) },
                                 limitedScope: context.scope?.coversAllUsers == false)
        case nil:
            throw Self.tampered("a key backend (\(name))")
        }
    }

    /// Chooses the backend at init: `software` and `tpm` as asked (a TPM that does not answer fails `tpm`); `auto`
    /// takes the TPM when one answers at the TCTI with keymgr's storage key in place, else software, saying why.
    static func chooseBackend(_ options: InitOptions) throws -> (kind: KeyBackendKind, reason: String) {
        switch options.keyBackend {
        case .software:
            return (.software, "chosen at init (--key-backend software)")
        case .tpm:
            _ = try TPMKeyBackend.mapped(options.tpmTcti) {
                try TPMConnection.with(tcti: options.tpmTcti) { try $0.storagePrimary() }
            }
            return (.tpm, "chosen at init (--key-backend tpm), TCTI \(options.tpmTcti)")
        case .auto:
            do {
                _ = try TPMConnection.with(tcti: options.tpmTcti) { try $0.storagePrimary() }
                return (.tpm, "auto: a TPM answered at \(options.tpmTcti) at init")
            } catch let failure as TPMFailure {
                let why: String
                switch failure {
                case .unreachable(_, let detail): why = "no TPM answered at \(options.tpmTcti) (\(detail))"
                default: why = "the TPM at \(options.tpmTcti) could not be used (\(failure))"
                }
                return (.software, "auto: \(why) at init, so keys are software keys")
            }
        }
    }
}
