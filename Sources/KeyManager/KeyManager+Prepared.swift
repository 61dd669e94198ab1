import Foundation
import Logging
import Storage
import Synchronization

/// A store opened and checked ahead of a request, by the agent's warm worker before anyone's request reaches it:
/// the database (read-only connection, and the writer pool), the master key, and the device row whose MAC held
/// under that key. It names no person: the manager made from it (`KeyManager.open(prepared:…)`) takes the caller
/// then, as a cold open does.
package struct PreparedStore: Sendable {
    let home: StoreHome
    let store: Store
    let masterKey: MasterKey
    let device: DeviceRecord
    /// The database file's identity, taken before it was opened.
    let database: Store.FileIdentity?
    /// The master key file as it was before it was read.
    let keyFile: KeyFileState

    /// What of the master key file decides which key it holds and whether it may be used (`MasterKey.load`'s
    /// checks): any change, and the prepared store is not used.
    struct KeyFileState: Sendable, Equatable {
        let device: UInt64
        let inode: UInt64
        let size: Int64
        let modified: Int
        let modifiedNanoseconds: Int
        let changed: Int
        let changedNanoseconds: Int
        let mode: UInt32
        let owner: UInt32
        let group: UInt32

        static func of(_ path: String) -> KeyFileState? {
            var info = stat()
            guard stat(path, &info) == 0 else { return nil }
            return KeyFileState(
                device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
                modified: info.st_mtim.tv_sec, modifiedNanoseconds: info.st_mtim.tv_nsec,
                changed: info.st_ctim.tv_sec, changedNanoseconds: info.st_ctim.tv_nsec,
                mode: info.st_mode, owner: info.st_uid, group: info.st_gid)
        }
    }
}

extension KeyManager {
    /// Opens the store in `location` and checks it as `open(home:)` does on its fast path (the master key's device
    /// MAC holds, the rows are stamped, the schema is current), without naming a caller.
    ///
    /// - Throws: whatever `open(home:)` would, or `config` when the store needs what only a full open does (an
    ///   upgrade, a rotation to finish): the request then opens the store itself.
    package static func prepare(home location: StoreLocation, context: RequestContext = .embedded,
                                environment: [String: String]) throws -> PreparedStore {
        let home = location.home
        // Identities first: a file replaced between them and the open is a changed identity at the next check.
        let database = Store.FileIdentity.of(home.databaseURL.path)
        let store = try mapped { try Store.open(home: home, create: false, access: .readOnly, digest: SHA256.hash) }
        guard let found = try mapped({ try store.read { try $0.deviceRow() } }) else {
            throw KeyManagerError(.config, "the store at \(home.url.path) was never initialised: run `keymgr init`")
        }
        let (device, snapshot) = (found.record, found.row)
        let source = MasterKey.source(home: home, environment: environment)
        guard let keyFile = PreparedStore.KeyFileState.of(source.path) else {
            throw KeyManagerError(.config, "the master key is missing: \(source.label) does not exist")
        }
        let masterKey = try MasterKey.load(from: source)
        let manager = try KeyManager(store: store, masterKey: masterKey, deviceId: device.deviceId,
                                     environment: environment, logger: silentLogger, now: { Date() }, context: context)
        let rows = try mapped { try store.read { try $0.rowStampState() } }
        guard rows == .current, try snapshot.macHolds(keys: manager.integrity.rowKeys) else {
            throw KeyManagerError(.config, "the store needs a full open (an upgrade or a rotation to finish)")
        }
        // The first write of the request then finds its connection open and the schema read.
        try mapped { try store.openWriterAhead() }
        return PreparedStore(home: home, store: store, masterKey: masterKey, device: device, database: database,
                             keyFile: keyFile)
    }

    /// A manager on `prepared` for the store in `location`, when nothing it was prepared from changed since: the
    /// home, the master key's source and its file (identity, size, times, owner, mode), the database file (identity,
    /// and the owner and mode checks a fresh open makes), the schema version, and the device row (the same row, and
    /// its MAC holds under the prepared key). Nil when anything did: the caller then opens the store afresh
    /// (`open(home:)`), which reports or repairs what changed.
    ///
    /// It serves a command that only reads as well as one that writes: its reads go through the read-only
    /// connection, and its writer pool is already open.
    package static func open(prepared: PreparedStore, home location: StoreLocation, context: RequestContext,
                             environment: [String: String],
                             logger: Logger = KeyManager.silentLogger,
                             now: @escaping @Sendable () -> Date = { Date() }) -> KeyManager? {
        guard location.home == prepared.home else { return nil }
        let source = MasterKey.source(home: prepared.home, environment: environment)
        guard source == prepared.masterKey.source,
              PreparedStore.KeyFileState.of(source.path) == prepared.keyFile,
              // A rotation under way: the full open knows which of the two keys opens the store.
              access(source.pending.path, F_OK) != 0 else { return nil }
        let store = prepared.store
        guard (try? store.checkFiles(identity: prepared.database)) != nil,
              (try? store.hasLatestSchema()) == true,
              let found = try? store.read({ try $0.deviceRow() }), found.record == prepared.device,
              let manager = try? KeyManager(store: store, masterKey: prepared.masterKey, deviceId: found.record.deviceId,
                                            environment: environment, logger: logger, now: now, context: context),
              (try? found.row.macHolds(keys: manager.integrity.rowKeys)) == true else {
            return nil
        }
        logger.debug("opened the store prepared ahead", metadata: [
            "home": .string(prepared.home.url.path), "masterKey": .string(source.label),
        ])
        return manager
    }
}

extension KeyManager {
    /// For a process that exits as soon as its one command is done (the agent's worker): from now on a released
    /// manager leaves its store's connections open until the exit rather than closing them first
    /// (`Store.keepsConnectionsUntilExit`). Never for a process that goes on after its command.
    package static func keepStoresOpenUntilExit() {
        Store.keepsConnectionsUntilExit.store(true, ordering: .relaxed)
    }
}

extension KeyManager {
    /// Run once by the agent's parent before it forks any worker: a whole request's first-use work, done on a
    /// scratch store so that every worker inherits it instead of paying for it on its request. The Swift runtime's
    /// type and conformance look-ups, SQLite's, GRDB's, Foundation's and OpenSSL's first-use set-up, the code pages
    /// all of it runs: a worker's warm open, `status` and a `sign` (with its audited write) cost less than half as
    /// much once the parent has run them (docs/agent.md, "Warm workers").
    ///
    /// The scratch store is a private temporary directory with a master key of its own and one user with one NONE
    /// key, removed before this returns: no person's data, no secret of the device's. Its connections stay open
    /// (on the removed files, never used again) for the life of the process, as releasing a GRDB connection makes
    /// libdispatch start a thread, and the process that forks must stay one thread. Whether it ran; when it could
    /// not (no writable temporary directory), the workers simply pay their own first use.
    @discardableResult
    package static func rehearseForWorkers() -> Bool {
        keepStoresOpenUntilExit()
        let template = (FileManager.default.temporaryDirectory.path + "/keymgr-rehearsal-XXXXXX").utf8CString
        var path = Array(template)
        guard let directory = path.withUnsafeMutableBufferPointer({ buffer -> String? in
            guard let start = buffer.baseAddress, let made = mkdtemp(start) else { return nil }
            return String(cString: made)
        }) else { return false }
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let location = StoreLocation(url: URL(fileURLWithPath: directory))
        // A stand-in caller, so that no manager looks its actor up in the user database.
        let standIn = AgentCaller(uid: geteuid(), gid: getegid(), pid: getpid(), groups: [], login: "keymgr-rehearsal")
        return rehearse(in: location, context: RequestContext(caller: standIn))
    }

    private static func rehearse(in location: StoreLocation, context: RequestContext) -> Bool {
        let noSecret: SecretProvider = { SecretBytes([]) }
        do {
            var options = InitOptions()
            options.deviceName = "rehearsal"
            options.keyBackend = .software
            let created = try initialize(home: location, options: options, context: context, environment: [:])
            _ = try created.bind(BindRequest(userId: "rehearsal"), newPIN: noSecret)
            let prepared = try prepare(home: location, context: context, environment: [:])
            guard let manager = open(prepared: prepared, home: location, context: context, environment: [:]) else { return false }
            _ = try manager.status()
            var request = SignRequest(userId: "rehearsal", kid: nil)
            request.challenge = "rehearsal"
            _ = try manager.sign(request, pin: noSecret)
            rehearsal.withLock { $0 = [created, manager] }
            return true
        } catch {
            return false
        }
    }

    /// The scratch store's managers, kept (see `rehearseForWorkers`).
    private static let rehearsal = Mutex<[KeyManager]>([])
}
