import Foundation
import GRDB

/// One device-bound key of one user: the row of `user_keys`.
package struct UserKeyRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "user_keys"

    /// `active` keys sign; `locked` ones wait for a rebind; `revoked` and `superseded` are tombstones.
    package enum Status: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
        case active, locked, revoked, superseded
    }

    /// How the key's user proves presence: the Ping Device Binding auth types, by their wire names.
    package enum AuthType: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
        case none = "NONE"
        case applicationPIN = "APPLICATION_PIN"
        case biometricOnly = "BIOMETRIC_ONLY"
        case biometricAllowFallback = "BIOMETRIC_ALLOW_FALLBACK"
    }

    /// What the server knows of this key.
    package enum ServerState: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
        case unregistered, registered, pendingDeletion, deleted
    }

    package var kid: String
    package var userId: String
    package var issuer: String
    package var authType: AuthType
    package var algorithm: String = "ES256"
    /// The public JWK, as JSON text.
    package var publicJwk: String
    /// The sealed private key; nil once the key material is destroyed.
    package var wrappedPrivateKey: Data?
    package var status: Status
    package var serverState: ServerState
    /// The name the server shows for this binding.
    package var deviceName: String?
    package var serverLastAccessAt: Date?
    package var createdAt: Date
    package var lastUsedAt: Date?
    package var revokedAt: Date?
    package var revokeReason: String?
    /// Where the private half lives: `software` (sealed P-256 scalar) or `tpm` (sealed TPM-wrapped blob).
    package var keyBackend: String = "software"

    package init(kid: String, userId: String, issuer: String, authType: AuthType, publicJwk: String,
                wrappedPrivateKey: Data?, status: Status, serverState: ServerState, deviceName: String? = nil,
                serverLastAccessAt: Date? = nil, createdAt: Date, lastUsedAt: Date? = nil,
                revokedAt: Date? = nil, revokeReason: String? = nil) {
        self.kid = kid
        self.userId = userId
        self.issuer = issuer
        self.authType = authType
        self.publicJwk = publicJwk
        self.wrappedPrivateKey = wrappedPrivateKey
        self.status = status
        self.serverState = serverState
        self.deviceName = deviceName
        self.serverLastAccessAt = serverLastAccessAt
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.revokedAt = revokedAt
        self.revokeReason = revokeReason
    }
}

/// A key with its owner's username, as `list` shows it.
package struct KeyListing: Sendable, Equatable {
    package var key: UserKeyRecord
    package var username: String?

    package init(key: UserKeyRecord, username: String?) {
        self.key = key
        self.username = username
    }
}

/// A key as `list` shows it, without its key material: what `StoreReader.forEachListedKey` hands over per row.
package struct ListedKey: Sendable, Equatable {
    package var kid: String
    package var userId: String
    package var username: String?
    package var authType: UserKeyRecord.AuthType
    package var status: UserKeyRecord.Status
    package var serverState: UserKeyRecord.ServerState
    package var deviceName: String?
    package var serverLastAccessAt: Date?
    package var createdAt: Date
    package var lastUsedAt: Date?
    package var issuer: String
    package var revokedAt: Date?
    package var revokeReason: String?
    /// An APPLICATION_PIN key that is active or locked: the wrong PINs it still takes before it locks (0: locked).
    package var pinAttemptsLeft: Int?
    /// The login of the person linked to the key's identity user (`person_links`), if any.
    package var owner: String?

    package init(kid: String, userId: String, username: String?, authType: UserKeyRecord.AuthType,
                status: UserKeyRecord.Status, serverState: UserKeyRecord.ServerState, deviceName: String?,
                serverLastAccessAt: Date?, createdAt: Date, lastUsedAt: Date?, issuer: String, revokedAt: Date?,
                revokeReason: String?, pinAttemptsLeft: Int? = nil) {
        self.pinAttemptsLeft = pinAttemptsLeft
        self.kid = kid
        self.userId = userId
        self.username = username
        self.authType = authType
        self.status = status
        self.serverState = serverState
        self.deviceName = deviceName
        self.serverLastAccessAt = serverLastAccessAt
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.issuer = issuer
        self.revokedAt = revokedAt
        self.revokeReason = revokeReason
    }
}
