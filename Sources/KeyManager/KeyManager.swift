import Foundation
import Logging
import Storage
import Synchronization

/// The facade over a keymgr store: bind, sign, rebind, revoke, PINs and the audit log, for every user on this device.
///
/// Every change commits in one transaction together with its audit entry. Secrets are sealed under keys derived
/// from the master key; PIN-protected keys also need the PIN. Nothing here prints; messages never carry a secret.
public final class KeyManager: Sendable {
    /// The store this manager works on.
    let store: Store
    private let currentKeys: Mutex<MasterKeys>
    let masterKeySource: MasterKey.Source
    /// The TCTI of the TPM the master key is sealed to (`init --master-key tpm`); nil for a key from a file.
    let masterKeyTCTI: String?
    let environment: [String: String]
    let logger: Logger
    let now: @Sendable () -> Date
    /// Who audit entries name as the actor: the OS user running keymgr, or the agent's caller ("alice (uid 1001)").
    public let actor: String
    /// The login name a verifier's `{osUser}` stands for: the OS user running keymgr, or the agent's caller.
    let osUser: String
    /// The store's device id, which the journal copy of each audit entry names.
    let deviceId: String

    /// The request this manager serves (who asks, what the policy decided): given to `open`, read by every decision
    /// of the facade (`reach`, KeyManager+AccessScope.swift). `.embedded`: keymgr run directly, no limit.
    let context: RequestContext

    init(store: Store, masterKey: MasterKey, deviceId: String, environment: [String: String], logger: Logger,
         now: @escaping @Sendable () -> Date, context: RequestContext) throws {
        self.store = store
        self.deviceId = deviceId
        self.currentKeys = Mutex(try MasterKeys(master: masterKey.bytes, deviceId: deviceId))
        self.masterKeySource = masterKey.source
        self.masterKeyTCTI = masterKey.tcti
        self.environment = environment
        self.logger = logger
        self.now = now
        self.context = context
        if let caller = context.caller {
            self.actor = caller.auditActor
            self.osUser = caller.login
        } else {
            self.actor = Self.osUserName()
            self.osUser = self.actor
        }
    }

    /// The master key's purpose keys and integrity keys this process holds now.
    var masterKeys: MasterKeys { currentKeys.withLock { $0 } }
    var hierarchy: KeyHierarchy { masterKeys.hierarchy }
    var integrity: Integrity { masterKeys.integrity }

    func replaceMasterKeys(_ keys: MasterKeys) { currentKeys.withLock { $0 = keys } }

    /// Creates a store in `home`: the database, the device row and (unless one is supplied elsewhere) the master key.
    public static func initialize(home location: StoreLocation, options: InitOptions,
                                  environment: [String: String] = ProcessInfo.processInfo.environment,
                                  logger: Logger = KeyManager.silentLogger,
                                  now: @escaping @Sendable () -> Date = { Date() }) throws -> KeyManager {
        try initialize(home: location, options: options, context: .embedded, environment: environment, logger: logger, now: now)
    }

    /// `initialize` for the request `context`, in the request's `environment` (no default: a request's environment
    /// is its own, not necessarily this process's).
    package static func initialize(home location: StoreLocation, options: InitOptions, context: RequestContext,
                                   environment: [String: String],
                                   logger: Logger = KeyManager.silentLogger,
                                   now: @escaping @Sendable () -> Date = { Date() }) throws -> KeyManager {
        try validate(options)
        // Before anything is written: a TPM asked for that does not answer leaves no half-made store behind.
        var (backend, reason) = try chooseBackend(options)
        let home = location.home
        let store = try mapped { try Store.open(home: home, create: true, digest: SHA256.hash) }
        if try mapped({ try store.read { try $0.device() } }) != nil {
            throw KeyManagerError(.config, "\(home.url.path) already holds a keymgr store: use it (change its settings with `keymgr config set`), or choose another --home")
        }
        var source = MasterKey.source(home: home, environment: environment)
        let masterKey: MasterKey
        if options.masterKey == .tpm {
            // The environment's sources come first when a store is opened: a TPM-sealed key would never be read.
            if case .systemdCredential(let path) = source { throw Self.masterKeyConflict("the systemd credential \(path)") }
            if case .environmentFile = source { throw Self.masterKeyConflict("KEYMGR_MASTER_KEY_FILE") }
            if case .home(let path) = source {
                guard !FileManager.default.fileExists(atPath: path) else {
                    throw KeyManagerError(.config, "\(path) already holds a master key in a file: remove it (it opens no "
                        + "store yet) or init without --master-key tpm")
                }
                let sealed = home.url.appendingPathComponent(MasterKey.sealedFileName, isDirectory: false).path
                source = .tpmSealed(sealed)
                masterKey = try MasterKey.createSealed(at: sealed, tcti: options.tpmTcti)
            } else {
                // Left by an init that stopped before its database write.
                masterKey = try MasterKey.load(from: source)
            }
        } else if case .home(let path) = source, !FileManager.default.fileExists(atPath: path) {
            masterKey = try MasterKey.create(at: path)
        } else {
            // A key supplied by systemd or KEYMGR_MASTER_KEY_FILE, or left by an init that stopped before its database
            // write (a file, or sealed to the TPM).
            masterKey = try MasterKey.load(from: source)
        }
        let deviceId = UUID().uuidString
        let manager = try KeyManager(store: store, masterKey: masterKey, deviceId: deviceId, environment: environment,
                                     logger: logger, now: now, context: context)
        let created = now()
        var tpm: TPMSetUp?
        if backend == .tpm {
            tpm = try manager.setUpTPM(options, deviceId: deviceId)
            if let note = tpm?.note { reason += "; \(note)" }
        }
        var record = DeviceRecord(
            deviceId: deviceId, deviceName: options.deviceName ?? Self.hostName(),
            osName: "linux", osVersion: Self.osVersion(), model: Self.machine(),
            issuer: options.issuer, pinRetry: options.pinRetry, pinMinLength: options.pinMinLength,
            argon2MemoryKib: options.argon2.memoryKiB, argon2Iterations: options.argon2.iterations,
            argon2Parallelism: options.argon2.parallelism,
            biometricVerifier: try options.biometricVerifier.map(Self.encodeArgv),
            credentialVerifier: try options.credentialVerifier.map(Self.encodeArgv),
            masterKeyCheck: try manager.hierarchy.seal(KeyHierarchy.masterCheckPlaintext, in: .masterCheck(deviceId: deviceId)),
            createdAt: created)
        record.keyBackend = backend.rawValue
        record.keyBackendReason = reason
        record.tpmTcti = backend == .tpm ? options.tpmTcti : nil
        record.tpmSecrets = tpm?.sealedSecrets
        record.tpmCounterIndex = tpm.map { Int64($0.counterIndex) }
        record.rollbackCounter = tpm.map { Int64($0.counterValue) }
        let device = record
        let first = try Self.mapped { try store.write(audit: manager.integrity.auditKeys, rows: manager.integrity.rowKeys) { writer in
            guard try writer.device() == nil else {
                throw KeyManagerError(.config, "\(home.url.path) already holds a keymgr store: use it (change its settings with `keymgr config set`), or choose another --home")
            }
            try writer.save(device)
            try writer.appendAudit(manager.auditEvent("store.initialized", details: [
                "deviceId": .string(deviceId), "issuer": .string(options.issuer),
                "masterKeySource": .string(Self.sourceKind(source)),
                "keyBackend": .string(backend.rawValue), "keyBackendReason": .string(reason),
            ]))
            return writer.appendedAudit
        } }
        manager.journal(first)
        return manager
    }

    /// Opens the store in `home` with its master key, for one request: `context` (built once per request by the
    /// agent's worker, or `.embedded` for keymgr run directly) is who asks and what the policy decided, and every
    /// decision of this manager reads it (`reach`). There is no overload without it: a caller that forgot the context
    /// would get the embedded one's full rights.
    ///
    /// `readOnly` is for a process that means only to read (`status`, `list`, `audit list`, …): its reads write
    /// nothing and sync nothing. Anything that does write still works (the writer is opened then); the integrity
    /// checks are the same either way.
    ///
    /// - Throws: `config` when there is no store, the master key is missing or is not this store's; `busy` when locked.
    package static func open(home location: StoreLocation, readOnly: Bool = false, context: RequestContext,
                             environment: [String: String],
                             logger: Logger = KeyManager.silentLogger,
                             now: @escaping @Sendable () -> Date = { Date() }) throws -> KeyManager {
        let home = location.home
        let store = try mapped {
            try Store.open(home: home, create: false, access: readOnly ? .readOnly : .readWrite, digest: SHA256.hash)
        }
        // The device row and whether the rows carry MACs yet, in one snapshot.
        let deviceAndStamps = { (reader: StoreReader) throws -> (DeviceRecord, DeviceRowSnapshot, RowStampState)? in
            try reader.deviceRow().map { ($0.record, $0.row, try reader.rowStampState()) }
        }
        guard let first = try mapped({ try store.read(deviceAndStamps) }) else {
            throw KeyManagerError(.config, "the store at \(home.url.path) was never initialised: run `keymgr init`")
        }
        let device = first.0
        let source = MasterKey.source(home: home, environment: environment)
        logger.debug("opened the store", metadata: ["home": .string(home.url.path), "masterKey": .string(source.label)])
        // A `master rotate` elsewhere may commit and rename its key file between any two of these reads: the device
        // row and the key file are read afresh on each of a few tries.
        for attempt in 0..<3 {
            let (device, snapshot, rows) = attempt == 0 ? first : (try mapped({ try store.read(deviceAndStamps) }) ?? first)
            let masterKey = try MasterKey.load(from: source)
            if let (manager, upgrade) = try? opened(store, masterKey, device, snapshot, rows, environment, logger, now, context) {
                try manager.upgradeStore(upgrade)
                return manager
            }
            // A rotation that committed but stopped (or has not yet got) to renaming its new key file into place.
            let pending = source.pending
            if FileManager.default.fileExists(atPath: pending.path),
               let next = try? MasterKey.load(from: pending),
               let (manager, upgrade) = try? opened(store, MasterKey(bytes: next.bytes, source: source, tcti: next.tcti),
                                                    device, snapshot, rows, environment, logger, now, context) {
                _ = rename(pending.path, source.path)  // or the rotation renamed it meanwhile: either way the key is in place
                MasterKey.syncDirectory(of: source.path)
                try manager.upgradeStore(upgrade)
                return manager
            }
        }
        // A key that MACs the store's other rows is the right one: the device row (its id or check value) was edited.
        if let key = try? MasterKey.load(from: source), let keys = try? MasterKeys(master: key.bytes, deviceId: device.deviceId),
           (try? mapped({ try store.read { try $0.someRowHolds(keys: keys.integrity.rowKeys) } })) == true {
            throw tampered("the device row (its device id or master key check value)")
        }
        throw KeyManagerError(.config, "the master key from \(source.label) does not open this store: "
            + "it is the wrong key (check KEYMGR_MASTER_KEY_FILE / $CREDENTIALS_DIRECTORY) or the store was damaged")
    }

    /// A manager holding `masterKey` once the device's check value opens under it, with what the store still needs
    /// stamped (a store made before the integrity MACs or the row MACs, or stamped under an older schema).
    private static func opened(_ store: Store, _ masterKey: MasterKey, _ device: DeviceRecord,
                               _ snapshot: DeviceRowSnapshot, _ rows: RowStampState,
                               _ environment: [String: String], _ logger: Logger,
                               _ now: @escaping @Sendable () -> Date,
                               _ context: RequestContext) throws -> (manager: KeyManager, upgrade: StoreUpgrade) {
        let manager = try KeyManager(store: store, masterKey: masterKey, deviceId: device.deviceId,
                                     environment: environment, logger: logger, now: now, context: context)
        // A device row MAC that holds under this key proves the key (and that the store was stamped): no need to open
        // the check value, which would cost an AES-GCM set-up every command pays at start-up. Otherwise the check
        // value tells a wrong key from a store made before the MACs and from an edited device row (reported when read).
        if rows == .current, try snapshot.macHolds(keys: manager.integrity.rowKeys) {
            return (manager, .none)
        }
        let check = try manager.hierarchy.open(device.masterKeyCheck, in: .masterCheck(deviceId: device.deviceId))
        switch check {
        // A version 3 store without row sets was edited: its reads report it.
        case KeyHierarchy.masterCheckPlaintext: return (manager, rows == .olderSchema ? .schema : .none)
        case KeyHierarchy.v2MasterCheckPlaintext: return (manager, .rows)
        case KeyHierarchy.legacyMasterCheckPlaintext: return (manager, .integrityAndRows)
        default: throw KeyManagerError(.config, "master key check value does not match")
        }
    }

    /// The logger a library user gets when it injects none: it says nothing (a library never prints).
    public static let silentLogger = Logger(label: "keymgr") { _ in SwiftLogNoOpLogHandler() }

    // MARK: Reading

    /// The device, schema version and counts `keymgr status` shows.
    public func status() throws -> StoreStatus {
        let visible = try usersInScope()
        // One snapshot: the schema version, the device row, the counts and the last sync agree.
        var status = try read { reader in
            let device = try verifiedDevice(reader)
            let counts = try reader.counts()
            let lastSync = try reader.lastSync()
            var status = StoreStatus(deviceId: device.deviceId, deviceName: device.deviceName, schemaVersion: try reader.schemaVersion(),
                                     users: counts.users, keys: counts.usableKeys, lastSync: lastSync?.finishedAt)
            status.keyBackend = KeyBackendKind(rawValue: device.keyBackend) ?? .software
            status.keyBackendReason = device.keyBackendReason
            status.tpmTcti = device.tpmTcti
            status.serverClockSkews = try reader.clockSkews(over: StoreStatus.reportedSkew).map {
                ServerClockSkew(serverName: $0.name, seconds: $0.offset)
            }
            status.masterKeySource = Self.sourceKind(masterKeySource)
            status.masterKeyLocation = masterKeySource.path
            status.masterKeyTCTI = masterKeyTCTI
            try overview(reader, into: &status, lastSync: lastSync, visible: visible)
            return status
        }
        // A TPM cleared or replaced (NV_ReadPublic only: nothing DA-protected). A TPM that does not answer is no
        // reason for `status` to fail.
        if status.keyBackend == .tpm { status.tpmReplaced = try? tpmReplacement() }
        return status
    }

    /// Every user on this device, with how many usable keys each holds.
    /// Under the agent's policy, only the users its scope covers.
    public func users() throws -> [UserSummary] {
        try read { reader in
            let visible = try visibleUsers(in: reader)
            let usable = try reader.keys(statuses: [.active, .locked])
            let perUser = Dictionary(grouping: usable, by: \.userId).mapValues(\.count)
            let owners = Dictionary(try reader.personLinks().map { ($0.userId, $0.login) }, uniquingKeysWith: { first, _ in first })
            return try reader.users().filter { visible?.contains($0.userId) ?? true }.map {
                UserSummary(userId: $0.userId, username: $0.username, activeKeys: perUser[$0.userId] ?? 0, createdAt: $0.createdAt,
                            owner: owners[$0.userId])
            }
        }
    }

    /// Keys of one user (or all users) with a status in `statuses`.
    public func keys(userId: String?, statuses: Set<KeyStatus>) throws -> [UserKey] {
        var keys: [UserKey] = []
        try forEachKey(userId: userId, statuses: statuses) { keys.append($0) }
        return keys
    }

    /// The keys `keys(userId:statuses:)` returns, in the same order, handed to `body` one at a time as the store
    /// reads them (one statement, one read snapshot), so that listing many keys holds none of them.
    ///
    /// With `verified`, each key row's MAC is checked (what sync decides on); without, nothing listed gates access
    /// (`list` over many keys), so no MAC is checked and no retry follows a master key rotation: `body` sees each
    /// key once either way.
    ///
    /// Under the agent's policy: a `userId` outside its scope is `denied`; without one, only the keys of users in
    /// scope are handed over.
    public func forEachKey(userId: String?, statuses: Set<KeyStatus>, verified: Bool = false,
                           _ body: (UserKey) throws -> Void) throws {
        if let userId {
            try authorize(userId: userId)
        } else if let allowed = try usersInScope() {
            try forEachKeyInStore(userId: nil, statuses: statuses, verified: verified) { key in
                if allowed.contains(key.userId) { try body(key) }
            }
            return
        }
        try forEachKeyInStore(userId: userId, statuses: statuses, verified: verified, body)
    }

    /// `forEachKey` without the scope check (done by the caller).
    private func forEachKeyInStore(userId: String?, statuses: Set<KeyStatus>, verified: Bool,
                                   _ body: (UserKey) throws -> Void) throws {
        if verified {
            let rows = integrity.rowKeys
            try Self.mapped {
                try store.read(rows: rows) { reader in
                    try reader.forEachKey(userId: userId, statuses: Set(statuses.map(\.record))) { try body(UserKey($0, username: nil)) }
                }
            }
            return
        }
        try Self.mapped {
            try store.read { reader in
                try reader.forEachListedKey(userId: userId, statuses: Set(statuses.map(\.record))) { try body(UserKey($0)) }
            }
        }
    }

    /// Every key (any status) of each user in `userIds`, read in one snapshot, each key row and user row checked
    /// against its MAC: what a sync reconciles for a slice of its users, without holding the keys of the others.
    public func keys(of userIds: [String]) throws -> [String: [UserKey]] {
        for userId in userIds { try authorize(userId: userId) }
        let statuses = Set(KeyStatus.allCases.map(\.record))
        return try read { reader in
            var keys: [String: [UserKey]] = [:]
            for userId in userIds {
                let username = try reader.user(id: userId)?.username
                try reader.forEachKey(userId: userId, statuses: statuses) { keys[userId, default: []].append(UserKey($0, username: username)) }
            }
            return keys
        }
    }

    // MARK: Shared plumbing

    /// The store's settings row, its MAC checked.
    func device() throws -> DeviceRecord { try read { try verifiedDevice($0) } }

    static func requireDevice(_ reader: StoreReader) throws -> DeviceRecord {
        guard let device = try reader.device() else {
            throw KeyManagerError(.config, "the store was never initialised: run `keymgr init`")
        }
        return device
    }

    /// Runs `body` in a read snapshot. A MAC that does not hold because another process rotated the master key
    /// meanwhile is not tampering: the new key is loaded and `body` runs again.
    ///
    /// Every record `body` reads is checked against its row MAC first.
    func read<T>(_ body: (StoreReader) throws -> T) throws -> T {
        do {
            return try Self.mapped { try store.read(rows: integrity.rowKeys, body) }
        } catch let error as KeyManagerError where error.code == .tampered {
            guard try reloadIfMasterKeyMoved() else {
                recordTampering(error)
                throw error
            }
            return try Self.mapped { try store.read(rows: integrity.rowKeys, body) }
        }
    }

    /// Runs `body` in one write transaction whose audit entries are MAC'd and anchored. Inside it, first checks that
    /// the master key this process holds is still the store's: when a `master rotate` elsewhere committed meanwhile,
    /// nothing is written under the discarded key; the new key is loaded and `body` runs again (so `body` must seal
    /// and MAC inside itself, from what it reads in the transaction). On a TPM store, the transaction ends with the
    /// rollback counter's one step (`stepRollback`), taken on the TPM once it committed.
    ///
    /// `steppingRollback: false` is for writes that only append audit entries (`appendAuditOnly`): an entry changes
    /// nothing that decides security, so it neither steps the counter nor waits on the TPM.
    @discardableResult
    func write<T>(steppingRollback: Bool = true, _ body: (StoreWriter) throws -> T) throws -> T {
        try writeWithDevice(steppingRollback: steppingRollback) { writer, _ in try body(writer) }
    }

    /// `write`, `body` also given the device row the transaction checked the master key against (no second read).
    @discardableResult
    func writeWithDevice<T>(steppingRollback: Bool = true, _ body: (StoreWriter, DeviceRecord) throws -> T) throws -> T {
        var attempts = 0
        while true {
            let keys = masterKeys
            var committed = false
            do {
                var step: RollbackStep?
                var appended: [AuditEventRecord] = []
                // A transaction that did not commit left the store as it was: the lock goes, the counter stays.
                defer { step?.release() }
                let result = try Self.mapped {
                    try store.write(audit: keys.integrity.auditKeys, rows: keys.integrity.rowKeys) { writer in
                        let device = try requireCurrentMasterKey(writer, keys)
                        let result = try body(writer, device)
                        appended = writer.appendedAudit
                        // Checked at the end: a store behind the counter throws, and the whole transaction with it.
                        // Only a TPM store has one (the key backend is fixed at init): no second device read otherwise.
                        if steppingRollback && device.keyBackend == KeyBackendKind.tpm.rawValue {
                            step = try stepRollback(writer, keys)
                        }
                        return result
                    }
                }
                // Committed: from here on `body` must never run again (a retry would repeat what it did).
                committed = true
                journal(appended)
                try step?.advance()
                return result
            } catch let error where attempts < 3 && !committed
                        && (error is MasterKeyMoved || (error as? KeyManagerError)?.code == .tampered) {
                attempts += 1
                guard try reloadIfMasterKeyMoved() else {
                    if let tampered = error as? KeyManagerError { recordTampering(tampered) }
                    throw error
                }
            } catch is MasterKeyMoved {
                throw KeyManagerError(.busy, "the master key kept changing while keymgr ran: try again in a moment")
            }
        }
    }

    /// Sends committed audit entries to the journal (`AuditJournal`); a journal that refuses them is logged, never
    /// an error of the write.
    func journal(_ entries: [AuditEventRecord]) {
        guard !entries.isEmpty, let path = AuditJournal.socketPath(environment) else { return }
        if let problem = AuditJournal.send(entries, deviceId: deviceId, processActor: actor, path: path) {
            logger.warning("could not send audit entries to the journal", metadata: ["error": .string(problem)])
        }
    }

    /// Appends `events` to the audit log and writes nothing else, in one transaction that does not step a TPM store's
    /// rollback counter (W7: a flood of denials must not wear the TPM's NV). The honest limit this leaves: a copy of
    /// the store that differs from the current one only by audit entries appended since is not told apart by the
    /// counter (docs/security.md says so).
    func appendAuditOnly(_ events: [NewAuditEvent]) throws {
        guard !events.isEmpty else { return }
        try write(steppingRollback: false) { writer in
            for event in events { try writer.appendAudit(event) }
        }
    }

    /// An audit entry stamped with now and this process's OS user.
    func auditEvent(_ event: String, userId: String? = nil, kid: String? = nil,
                    details: [String: JSONValue] = [:]) -> NewAuditEvent {
        NewAuditEvent(at: now(), event: event, userId: userId, kid: kid, actor: actor,
                      details: JSONValue.object(details).canonicalJSON())
    }

    /// The verifiers of a device row whose MAC was checked.
    func verification(_ device: DeviceRecord) -> UserVerification {
        UserVerification(biometric: device.biometricVerifier.flatMap(Self.decodeArgv),
                         credential: device.credentialVerifier.flatMap(Self.decodeArgv), osUser: osUser)
    }

    /// Storage's errors in the taxonomy: busy stays busy, an unsafe or missing home is a configuration error.
    static func mapped<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as StorageError {
            switch error.code {
            case .busy: throw KeyManagerError(.busy, error.message)
            case .insecureHome, .notInitialized, .newerSchema, .notAStore: throw KeyManagerError(.config, error.message)
            case .tampered: throw KeyManagerError(.tampered, error.message)
            case .notFound: throw KeyManagerError(.clientNotRegistered, error.message)
            case .conflict, .failure: throw KeyManagerError(.failure, error.message)
            }
        }
    }

    static func validate(_ options: InitOptions) throws {
        guard (1...10).contains(options.pinRetry) else {
            throw KeyManagerError(.usage, "--pin-retry must be between 1 and 10 (NIST SP 800-63B allows at most 10 failures)")
        }
        guard (4...64).contains(options.pinMinLength) else {
            throw KeyManagerError(.usage, "--pin-min-length must be between 4 and 64")
        }
        let argon2 = options.argon2
        guard argon2.parallelism >= 1, argon2.iterations >= 1, argon2.memoryKiB >= 8 * argon2.parallelism else {
            throw KeyManagerError(.usage, "Argon2 needs parallelism >= 1, iterations >= 1 and memory >= 8 KiB per lane")
        }
        guard !options.issuer.isEmpty else { throw KeyManagerError(.usage, "--issuer must not be empty") }
        if options.keyBackend != .software || options.masterKey == .tpm {
            try TCTIReach.check(options.tpmTcti, allowNetwork: options.tpmTctiAllowNetwork)
        }
        // Shown by `status` and sent to servers: no terminal escapes, controls or bidi overrides.
        if let deviceName = options.deviceName { try TextRules.checkIdentifier(deviceName, what: "device name (--device-name)") }
        for argv in [options.biometricVerifier, options.credentialVerifier].compactMap({ $0 }) {
            guard let program = argv.first, program.hasPrefix("/") else {
                throw KeyManagerError(.usage, "a verifier command must start with an absolute path, e.g. /usr/bin/fprintd-verify")
            }
        }
    }

    static func encodeArgv(_ argv: [String]) throws -> String {
        JSONValue.array(argv.map(JSONValue.string)).canonicalJSON()
    }

    static func decodeArgv(_ json: String) -> [String]? {
        guard let data = json.data(using: .utf8), let argv = try? JSONDecoder().decode([String].self, from: data),
              !argv.isEmpty else { return nil }
        return argv
    }

    static func sourceKind(_ source: MasterKey.Source) -> String {
        switch source {
        case .systemdCredential: "systemd-credential"
        case .environmentFile: "KEYMGR_MASTER_KEY_FILE"
        case .home: "home"
        case .tpmSealed: "tpm"
        }
    }

    private static func masterKeyConflict(_ other: String) -> KeyManagerError {
        KeyManagerError(.usage, "--master-key tpm asks for a master key sealed to the TPM, but \(other) supplies one "
            + "and would be read first: unset it, or init without --master-key tpm")
    }

    static func osUserName() -> String {
        if let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name { return String(cString: name) }
        return "uid:\(geteuid())"
    }

    private static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "linux" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func uname() -> utsname {
        var info = utsname()
        _ = Glibc.uname(&info)
        return info
    }

    private static func field<T>(_ value: T) -> String {
        withUnsafeBytes(of: value) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }

    private static func osVersion() -> String { field(uname().release) }

    private static func machine() -> String { field(uname().machine) }
}
