import Foundation
import Storage

/// The keys of the store's one integrity mechanism (docs/security.md, "Every row keymgr trusts"): the row MACs and
/// row-set tags over every row of every table keymgr trusts, and the keyed audit chain with its anchors.
///
/// Every key is an HKDF purpose key of the master key, so a database writer without the master key cannot change a
/// row consistently: keymgr reports the mismatch as `tampered` and uses nothing from that row.
struct Integrity: Sendable {
    private let auditChainKey: SecretBytes
    private let auditAnchorKey: SecretBytes
    private let rowKey: SecretBytes
    private let rowSetKey: SecretBytes
    /// The store's device id, in every MAC of the audit chain: a chain copied from another store does not verify.
    let deviceId: String

    init(hierarchy: KeyHierarchy, deviceId: String) throws {
        auditChainKey = try hierarchy.purposeKey("audit.chain")
        auditAnchorKey = try hierarchy.purposeKey("audit.anchor")
        rowKey = try hierarchy.purposeKey("integrity.rows")
        rowSetKey = try hierarchy.purposeKey("integrity.row_sets")
        self.deviceId = deviceId
    }

    /// The keyed audit chain's HMACs for Storage, which does no crypto itself.
    var auditKeys: AuditKeys {
        let (chain, anchor, prefix) = (auditChainKey, auditAnchorKey, Array("\(deviceId.utf8.count):\(deviceId)|".utf8))
        return AuditKeys(chain: { try HMACSHA256.authenticate(prefix + $0, key: chain) },
                         anchor: { try HMACSHA256.authenticate(prefix + $0, key: anchor) })
    }

    /// The row MACs and row-set tags for Storage (every row of every table keymgr trusts; see `RowIntegrity`).
    var rowKeys: RowIntegrityKeys {
        let (row, set) = (rowKey, rowSetKey)
        return RowIntegrityKeys(mac: { try HMACSHA256.authenticate($0, key: row) },
                                tag: { try HMACSHA256.authenticate($0, key: set) })
    }

}

/// The field MACs of migration 0002, which row MACs replaced (migration 0012 dropped their columns): checked only on
/// the first open of a store made before row MACs (check version 2), before its rows are stamped, so an edit made to
/// such a store while it lay unused still shows. Never made any more.
struct LegacyFieldMACs: Sendable {
    private let deviceKey: SecretBytes
    private let keyRowKey: SecretBytes
    private let pinKey: SecretBytes
    private let serverKey: SecretBytes

    init(hierarchy: KeyHierarchy) throws {
        deviceKey = try hierarchy.purposeKey("integrity.device")
        keyRowKey = try hierarchy.purposeKey("integrity.user_keys")
        pinKey = try hierarchy.purposeKey("integrity.app_pins")
        serverKey = try hierarchy.purposeKey("integrity.servers")
    }

    func mac(_ device: DeviceRecord) throws -> Data {
        try Self.mac(deviceKey, "device", [
            device.deviceId, device.issuer, String(device.pinRetry), String(device.pinMinLength),
            String(device.argon2MemoryKib), String(device.argon2Iterations), String(device.argon2Parallelism),
            device.biometricVerifier, device.credentialVerifier,
        ] + Self.backendFields(device))
    }

    /// A TPM store's backend fields; nothing for a software store (a schema-2 store knew no backends).
    private static func backendFields(_ device: DeviceRecord) -> [String?] {
        guard device.keyBackend != "software" || device.tpmTcti != nil || device.tpmSecrets != nil else { return [] }
        return ["backend", device.keyBackend, device.tpmTcti,
                device.tpmSecrets.map { Hex.encode(SHA256.hash([UInt8]($0))) },
                device.tpmCounterIndex.map { String($0) }, device.rollbackCounter.map { String($0) }]
    }

    func mac(_ key: UserKeyRecord) throws -> Data {
        try Self.mac(keyRowKey, "user_keys", [
            key.kid, key.userId, key.issuer, key.authType.rawValue, key.status.rawValue, key.algorithm, key.publicJwk,
            key.wrappedPrivateKey.map { Hex.encode(SHA256.hash([UInt8]($0))) },
        ] + (key.keyBackend == "software" ? [] : ["backend", key.keyBackend]))
    }

    func mac(_ pin: AppPINRecord) throws -> Data {
        try Self.mac(pinKey, "app_pins", [
            pin.kid, String(pin.argon2MemoryKib), String(pin.argon2Iterations), String(pin.argon2Parallelism),
            Hex.encode([UInt8](pin.salt)), Hex.encode(SHA256.hash([UInt8](pin.verifier))),
            String(pin.failedAttempts), String(pin.pinRetry),
        ])
    }

    func mac(_ server: ServerRecord) throws -> Data {
        try Self.mac(serverKey, "servers", [
            server.name, server.dialect, server.baseUrl, server.realmPath, server.credentialFile,
            server.credentialHeader, server.tokenEndpoint, server.registrationEndpoint, server.revocationEndpoint,
            server.deviceAuthorizationEndpoint, server.tokenBinding.rawValue, server.allowInsecureHttp ? "1" : "0",
        ])
    }

    /// Whether `stored` (nil when the row had none) is the MAC `expected`.
    func holds(_ stored: Data?, _ expected: Data) -> Bool {
        guard let stored else { return false }
        return constantTimeEquals([UInt8](stored), [UInt8](expected))
    }

    /// Length-prefixed fields (nil apart from empty), so no choice of values makes two rows encode alike.
    private static func mac(_ key: SecretBytes, _ table: String, _ fields: [String?]) throws -> Data {
        var message = Array("keymgr-integrity-v1|\(table)".utf8)
        for field in fields {
            if let field {
                message.append(contentsOf: Array("|\(field.utf8.count):".utf8))
                message.append(contentsOf: Array(field.utf8))
            } else {
                message.append(contentsOf: Array("|-".utf8))
            }
        }
        return Data(try HMACSHA256.authenticate(message, key: key))
    }
}

/// The master key's purpose keys and integrity keys, replaced together when another process rotated the master key.
struct MasterKeys: Sendable {
    let hierarchy: KeyHierarchy
    let integrity: Integrity

    init(master: SecretBytes, deviceId: String) throws {
        hierarchy = KeyHierarchy(master: master)
        integrity = try Integrity(hierarchy: hierarchy, deviceId: deviceId)
    }
}

/// Thrown inside a write transaction when the store's master key is no longer the one this process holds.
struct MasterKeyMoved: Error {}

extension KeyManager {
    /// The error for a row whose MAC does not hold: nothing from it is used, and no PIN attempt is spent.
    static func tampered(_ what: String) -> KeyManagerError {
        KeyManagerError(.tampered, "\(what) was changed outside keymgr (its MAC does not match under the master key), "
            + "so keymgr will not use it: run `keymgr audit verify` to see what else changed and restore the store from a backup")
    }

    /// The device row's settings, once its row MAC held when it was read: a PIN policy out of range is refused too.
    func verified(_ device: DeviceRecord) throws -> DeviceRecord {
        guard (1...10).contains(device.pinRetry) else {
            throw Self.tampered("the device settings (verifier commands, Argon2 parameters, PIN policy)")
        }
        return device
    }

    /// A PIN record, once its row MAC held when it was read: a counter or retry limit out of range is refused too.
    func verified(_ pin: AppPINRecord) throws -> AppPINRecord {
        guard (1...10).contains(pin.pinRetry), pin.failedAttempts >= 0 else {
            throw Self.tampered("the PIN record of key \(pin.kid) (its failure counter, retry limit or Argon2 cost)")
        }
        return pin
    }

    /// The store's device row, its MAC checked (by a reader that checks rows) and its settings in range.
    func verifiedDevice(_ reader: StoreReader) throws -> DeviceRecord {
        try verified(try Self.requireDevice(reader))
    }

    /// Inside a write transaction: refuses (with `MasterKeyMoved`) to go on when another process rotated the master
    /// key since this one loaded it, so nothing is ever sealed or MAC'd under a discarded key. Returns the device row
    /// it read (its MAC not checked here: a caller that relies on its settings verifies it).
    @discardableResult
    func requireCurrentMasterKey(_ writer: StoreWriter, _ keys: MasterKeys) throws -> DeviceRecord {
        let device = try Self.requireDevice(writer)
        guard (try? keys.hierarchy.open(device.masterKeyCheck, in: .masterCheck(deviceId: device.deviceId))) != nil else {
            throw MasterKeyMoved()
        }
        return device
    }

    /// When the store is no longer sealed under the master key this process holds (a `master rotate` elsewhere
    /// committed), loads the new one from the key file or the rotation's pending `.next` file. Returns whether it did.
    func reloadIfMasterKeyMoved() throws -> Bool {
        let device = try Self.mapped { try store.read { try Self.requireDevice($0) } }
        let slot = SealedSlot.masterCheck(deviceId: device.deviceId)
        if (try? masterKeys.hierarchy.open(device.masterKeyCheck, in: slot)) != nil { return false }
        // The device row still MAC'd under this key: no rotation committed (that re-MACs it); its check value was edited.
        if try Self.mapped({ try store.read { try $0.deviceRow()?.row.macHolds(keys: integrity.rowKeys) } }) == true { return false }
        for _ in 0..<3 {
            for source in [masterKeySource, masterKeySource.pending] {
                guard let candidate = try? MasterKey.load(from: source),
                      let keys = try? MasterKeys(master: candidate.bytes, deviceId: device.deviceId),
                      (try? keys.hierarchy.open(device.masterKeyCheck, in: slot)) != nil else { continue }
                replaceMasterKeys(keys)
                logger.debug("the master key was rotated by another process: reloaded it")
                return true
            }
        }
        throw KeyManagerError(.config, "the master key was rotated while keymgr ran and the new key could not be read "
            + "from \(masterKeySource.label): run the command again")
    }
}

/// What the first open of a store with its master key must do before anything else (see `upgradeStore(_:)`).
enum StoreUpgrade: Equatable {
    /// Nothing: every row is stamped under the schema keymgr runs.
    case none
    /// Made before the integrity MACs (check version 1): the keyed audit chain and every row.
    case integrityAndRows
    /// Made before row MACs (check version 2): its field MACs checked, then every row stamped.
    case rows
    /// Stamped under an older schema (a later migration added tables or columns): every row, once the old ones hold.
    case schema
}

extension KeyManager {
    /// The schema version (migration 0007) that brought person links.
    static let personLinksSchema = 7

    /// Upgrades a store made before the MACs, or stamped under an older schema, in ONE transaction under the master
    /// key: a store older than the integrity MACs gets its audit chain keyed and anchored; a store made before row
    /// MACs has its field MACs (migration 0002, kept by 0012) checked; then every row of every table keymgr trusts is stamped with its row MAC and
    /// each table's set committed, and the master key check is re-sealed as version 3. This happens once, the first
    /// time this keymgr opens the store; afterwards a missing MAC is tampering. (An attacker cannot forge an older
    /// check without an older copy of this store's file, and rolling the whole file back is the documented limit.)
    /// After a later migration, rows are checked under the columns they were stamped with before they are re-stamped.
    func upgradeStore(_ upgrade: StoreUpgrade) throws {
        guard upgrade != .none else { return }
        let keys = masterKeys
        let version = { (device: DeviceRecord) -> StoreUpgrade? in
            switch try? keys.hierarchy.open(device.masterKeyCheck, in: .masterCheck(deviceId: device.deviceId)) {
            case KeyHierarchy.legacyMasterCheckPlaintext: .integrityAndRows
            case KeyHierarchy.v2MasterCheckPlaintext: .rows
            case KeyHierarchy.masterCheckPlaintext: .schema
            default: nil
            }
        }
        let appended = try Self.mapped {
            // No row keys: this transaction stamps every row itself (`stampAllRows`).
            try store.write(audit: keys.integrity.auditKeys) { writer -> [AuditEventRecord] in
                var device = try Self.requireDevice(writer)
                // Re-read inside the transaction: another keymgr may have upgraded meanwhile; a check that does not
                // open means a rotation elsewhere committed, after it upgraded (the next write reloads the key).
                guard let found = version(device) else { return [] }
                // Person links came with schema 7: a store stamped before it (or never) gets them once, now.
                let stampedUnder = try writer.stampedSchemaVersion() ?? 0
                let needsLinks = found != .schema || stampedUnder < Self.personLinksSchema
                if found == .schema {
                    guard try writer.rowStampState() == .olderSchema else { return [] }
                    // Checked under the columns they were stamped with before anything is written.
                    try writer.verifyRowsOrThrow(keys: keys.integrity.rowKeys)
                } else if try writer.rowStampState() != .unstamped {
                    // Rows stamped under an older check: an old check value was put back to have every row re-stamped.
                    throw Self.tampered("the master key check value (older than the store's row MACs)")
                }
                var details: [String: JSONValue] = [:]
                if found == .rows {
                    // Made before row MACs: its field MACs (kept by migration 0012) must hold before rows are stamped.
                    try checkFieldMACs(writer, device, keys)
                }
                if found == .integrityAndRows {
                    let pins = try writer.appPINs()
                    for var pin in pins where !(1...10).contains(pin.pinRetry) {
                        pin.pinRetry = min(max(pin.pinRetry, 1), 10)
                        try writer.save(pin)
                    }
                    let entries = try writer.stampAuditChain(keys: keys.integrity.auditKeys)
                    details = ["keys": .int(Int64(try writer.keys(statuses: Set(UserKeyRecord.Status.allCases)).count)),
                               "pinRecords": .int(Int64(pins.count)), "servers": .int(Int64(try writer.servers().count)),
                               "auditEntries": .int(Int64(entries))]
                }
                if found != .schema {
                    device.masterKeyCheck = try keys.hierarchy.seal(KeyHierarchy.masterCheckPlaintext,
                                                                    in: .masterCheck(deviceId: device.deviceId))
                    try writer.save(device)
                }
                details["rows"] = .string(found == .schema ? "re-stamped after a migration" : "stamped")
                try writer.appendAudit(auditEvent("store.integrityStamped", details: details))
                if needsLinks { _ = try linkMigratedPeople(writer) }
                try writer.stampAllRows(keys: keys.integrity.rowKeys)
                return writer.appendedAudit
            }
        }
        journal(appended)
        logger.debug("stamped the store's integrity MACs", metadata: ["upgrade": "\(upgrade)"])
    }
}

extension KeyManager {
    /// The field MACs of a store made before row MACs, checked once before its rows are stamped: the device row,
    /// every key, PIN record and server profile must carry one that holds (migration 0012 kept them).
    func checkFieldMACs(_ writer: StoreWriter, _ device: DeviceRecord, _ keys: MasterKeys) throws {
        let legacy = try LegacyFieldMACs(hierarchy: keys.hierarchy)
        let macs = try Self.mapped { try writer.droppedFieldMACs() }
        guard legacy.holds(macs["device"]?["1"], try legacy.mac(device)) else {
            throw Self.tampered("the device settings (verifier commands, Argon2 parameters, PIN policy)")
        }
        for key in try writer.keys(statuses: Set(UserKeyRecord.Status.allCases))
        where !legacy.holds(macs["user_keys"]?[key.kid], try legacy.mac(key)) {
            throw Self.tampered("key \(key.kid) (its owner, issuer, auth type, status or sealed key)")
        }
        for pin in try writer.appPINs() where !legacy.holds(macs["app_pins"]?[pin.kid], try legacy.mac(pin)) {
            throw Self.tampered("the PIN record of key \(pin.kid) (its failure counter, retry limit or Argon2 cost)")
        }
        for server in try writer.servers() where !legacy.holds(macs["servers"]?[server.name], try legacy.mac(server)) {
            throw Self.tampered("the server profile \(server.name)")
        }
    }
}
