import Foundation
import Glibc
import Storage

/// One line of `keymgr doctor`: what was checked, whether it holds, what is wrong (or what was found), and the one
/// thing to do about it.
public struct DoctorCheck: Sendable, Equatable {
    /// A stable name: `agent`, `store.files`, `store.schema`, `store.integrity`, `masterKey`, `disk`, `sync`,
    /// `server` (or `server.PROFILE`), `tpm`.
    public let name: String
    public let ok: Bool
    public let message: String
    /// The one thing to do (nil when all is well).
    public let fix: String?

    public init(_ name: String, ok: Bool, _ message: String, fix: String? = nil) {
        self.name = name
        self.ok = ok
        self.message = message
        self.fix = fix
    }
}

/// `keymgr doctor`: checks a device's store as an administrator would, each check on its own, so one broken thing
/// does not hide the others. Nothing is written and nothing DA-protected is touched in the TPM (its counter and
/// lockout state are read with a capability query), so running it on a timer can never cause a lockout.
public enum Doctor {
    /// How much free space the home's file system should keep, and how large the WAL may grow before it is named.
    public static let minimumFreeBytes: UInt64 = 64 << 20
    public static let largestWAL: Int64 = 64 << 20
    /// How old the last sync may be: four runs of keymgr-sync.timer (every 15 minutes).
    public static let syncInterval: TimeInterval = 15 * 60

    /// Every check, in order. `extra` adds the checks of the store's opened manager that need more than this module
    /// (the server's, over the network), after `sync`.
    /// `context`: the request's, so a person served by the agent sees only what concerns them (the TPM's unusable keys
    /// and the sync errors of the identities they may reach).
    package static func run(home location: StoreLocation, context: RequestContext, environment: [String: String],
                           now: Date = Date(), extra: (KeyManager) -> [DoctorCheck] = { _ in [] }) -> [DoctorCheck] {
        let home = location.home
        var checks = [files(home)]
        let schema = Self.schema(home)
        checks.append(schema.check)
        guard let store = schema.store else { return checks }
        checks.append(integrity(store))
        let opened = masterKey(location, home, context, environment)
        checks.append(opened.check)
        checks.append(disk(home))
        if let manager = opened.manager {
            checks.append(sync(manager, now: now))
            checks += extra(manager)
            if let tpm = tpm(manager) { checks.append(tpm) }
        }
        return checks
    }

    /// The agent as it describes itself to a request it serves: its socket, its policy file and, when that file as
    /// it is now does not load, why (the running agent keeps the policy it loaded; a restart would meet this one).
    public struct ServingAgent: Sendable {
        public let socket: String
        public let policy: String
        public let policyProblem: String?

        public init(socket: String, policy: String, policyProblem: String?) {
            self.socket = socket
            self.policy = policy
            self.policyProblem = policyProblem
        }
    }

    /// The agent check. Through the agent (`serving`): its socket and whether its policy loads, the policy's mistake
    /// said in full to an administrator and only where it is (`file:line`) to a person, since a policy's lines name
    /// other people. Run directly: the systemd units' state when systemd runs this system.
    package static func agent(_ serving: ServingAgent?, context: RequestContext,
                              failedUnits: () -> [String]? = { SystemdUnits.failed(["keymgr.socket", "keymgr.service"]) })
        -> DoctorCheck {
        if let agent = serving {
            guard let problem = agent.policyProblem else {
                return DoctorCheck("agent", ok: true, "served by the agent at \(agent.socket); its policy \(agent.policy) loads")
            }
            let administrator = context.scope?.coversAllUsers != false
            return DoctorCheck("agent", ok: false, "the agent at \(agent.socket) serves, but its policy \(agent.policy) "
                + "as it is now does not load (\(administrator ? problem : whereOnly(problem))): the next restart of "
                + "keymgr.service will fail",
                fix: administrator ? "correct it, then check it with `keymgr agent --check-policy \(agent.policy)`"
                    : "ask the device's administrator to correct the agent's policy")
        }
        if let failed = failedUnits(), !failed.isEmpty {
            return DoctorCheck("agent", ok: false, "\(failed.joined(separator: " and ")) failed (a policy that did not "
                + "load, or systemd's start limit): people's commands find no agent",
                fix: "check the policy with `keymgr agent --check-policy`, then run `systemctl reset-failed keymgr.socket "
                    + "keymgr.service && systemctl start keymgr.socket`")
        }
        return DoctorCheck("agent", ok: true, "not used: this command opened the store itself")
    }

    /// A policy's mistake as a person may read it: its `file:line`, without the words of the line.
    static func whereOnly(_ problem: String) -> String {
        String(problem.prefix(while: { $0 != " " })).trimmingCharacters(in: CharacterSet(charactersIn: ":"))
    }

    /// The home, every directory above it, and the database files: owned by this user or root, writable by no one
    /// else (a world-writable directory with the sticky bit, owned by root, such as /tmp, is allowed above the home).
    static func files(_ home: StoreHome) -> DoctorCheck {
        let name = "store.files"
        var info = stat()
        guard lstat(home.url.path, &info) == 0 else {
            return DoctorCheck(name, ok: false, "there is no store at \(home.url.path)",
                               fix: "run `keymgr init`, or point --home (KEYMGR_HOME) at the store")
        }
        var directory = home.url.deletingLastPathComponent()
        while true {
            var parent = stat()
            if stat(directory.path, &parent) == 0 {
                let sticky = parent.st_mode & S_ISVTX != 0 && parent.st_uid == 0
                if !AgentAccount.mayOwnStore(parent.st_uid) {
                    return DoctorCheck(name, ok: false, "\(directory.path), above the home, belongs to uid \(parent.st_uid), "
                        + "who could move the store away", fix: "keep the home under directories owned by root or by keymgr's user")
                }
                if parent.st_mode & 0o022 != 0 && !sticky {
                    return DoctorCheck(name, ok: false, "\(directory.path), above the home, can be written by other users "
                        + "(mode \(String(parent.st_mode & 0o777, radix: 8)))", fix: "run `chmod go-w \(directory.path)`")
                }
            }
            if directory.path == "/" || directory.path.isEmpty { break }
            directory = directory.deletingLastPathComponent()
        }
        // The home may be readable (systemd's StateDirectory= is 0755); the database files are nobody else's.
        let targets = [(home.url.path, "home directory", mode_t(0o022), "chmod go-w")]
            + ["", "-wal", "-shm"].map { (home.databaseURL.path + $0, "database file", mode_t(0o077), "chmod 600") }
        for (path, kind, forbidden, fix) in targets {
            var target = stat()
            guard lstat(path, &target) == 0 else { continue }
            if !AgentAccount.mayOwnStore(target.st_uid) {
                return DoctorCheck(name, ok: false, "the \(kind) \(path) belongs to uid \(target.st_uid)",
                                   fix: geteuid() == 0
                                    ? "run `chown \(AgentAccount.name) \(path)` if it is the agent's store, `chown 0 \(path)` if it is root's"
                                    : "run `chown \(geteuid()) \(path)` (keymgr's user must own its store)")
            }
            if target.st_mode & forbidden != 0 {
                return DoctorCheck(name, ok: false, "the \(kind) \(path) has mode \(String(target.st_mode & 0o777, radix: 8)) "
                    + "(others may read or write it)", fix: "run `\(fix) \(path)`")
            }
        }
        if info.st_uid != geteuid(), info.st_uid == AgentAccount.uid {
            return DoctorCheck(name, ok: true, "\(home.url.path) and its files are the agent's user's "
                + "(\(AgentAccount.name), uid \(info.st_uid)) alone")
        }
        return DoctorCheck(name, ok: true, "\(home.url.path) and its files are this user's alone")
    }

    /// The store opens (read-only) and its schema is the one this keymgr knows.
    static func schema(_ home: StoreHome) -> (check: DoctorCheck, store: Store?) {
        do {
            let store = try Store.open(home: home, create: false, access: .readOnly, digest: SHA256.hash)
            return (DoctorCheck("store.schema", ok: true, "schema version \(try store.schemaVersion()) (this keymgr's)"), store)
        } catch let error as StorageError {
            let fix: String
            switch error.code {
            case .notInitialized: fix = "run `keymgr init`, or point --home at the store"
            case .newerSchema: fix = "upgrade keymgr to the version that wrote this store"
            case .insecureHome: fix = "make the home and its files keymgr's user's alone (see store.files)"
            default: fix = "restore the home from a backup"
            }
            return (DoctorCheck("store.schema", ok: false, error.message, fix: fix), nil)
        } catch {
            return (DoctorCheck("store.schema", ok: false, "the store does not open: \(error)",
                                fix: "restore the home from a backup"), nil)
        }
    }

    /// SQLite's quick check of the database file.
    static func integrity(_ store: Store) -> DoctorCheck {
        do {
            let problems = try store.read { try $0.quickCheck() }
            guard problems.isEmpty else {
                return DoctorCheck("store.integrity", ok: false, "the database file is damaged: \(problems.prefix(3).joined(separator: "; "))",
                                   fix: "stop keymgr and restore the home from a backup")
            }
            return DoctorCheck("store.integrity", ok: true, "the database file holds together (SQLite quick check)")
        } catch {
            return DoctorCheck("store.integrity", ok: false, "the database file cannot be read: \(error)",
                               fix: "stop keymgr and restore the home from a backup")
        }
    }

    /// Where the master key comes from, that it is there, and that it opens this store.
    static func masterKey(_ location: StoreLocation, _ home: StoreHome, _ context: RequestContext,
                          _ environment: [String: String]) -> (check: DoctorCheck, manager: KeyManager?) {
        let source = MasterKey.source(home: home, environment: environment)
        let kind = KeyManager.sourceKind(source)
        if case .tpmSealed = source {} else if !FileManager.default.fileExists(atPath: source.path) {
            if case .home = source, !context.isServed, let agents = agentCredential(home, environment) {
                return (agents, nil)
            }
            return (DoctorCheck("masterKey", ok: false, "the master key (\(kind)) is missing at \(source.path)",
                                fix: "restore \(source.path) from its backup (without it the store cannot be opened)"), nil)
        }
        do {
            let manager = try KeyManager.open(home: location, readOnly: true, context: context, environment: environment)
            return (DoctorCheck("masterKey", ok: true, "from \(kind) (\(source.path)); it opens this store"), manager)
        } catch let failure as KeyManagerError {
            return (DoctorCheck("masterKey", ok: false, "the master key from \(kind) (\(source.path)) does not open the store: "
                + failure.message, fix: "give keymgr this store's master key (check KEYMGR_MASTER_KEY_FILE, "
                + "$CREDENTIALS_DIRECTORY, or restore the key file)"), nil)
        } catch {
            return (DoctorCheck("masterKey", ok: false, "the store does not open: \(error)",
                                fix: "run `keymgr audit verify` to see what is wrong"), nil)
        }
    }

    /// The agent's store checked directly (not through the agent): its master key is keymgr.service's credential,
    /// which systemd hands to that service alone, so this process cannot see it. What can be seen is checked
    /// instead: the credential's source as the installed unit declares it, there, root's, and nobody else's to read
    /// or replace. nil when the installed keymgr.service serves another home, or loads no `keymgr.master`.
    static func agentCredential(_ home: StoreHome, _ environment: [String: String]) -> DoctorCheck? {
        guard let unit = SystemdUnitFile.installed("keymgr.service", environment: environment),
              let served = unit.home, URL(fileURLWithPath: served).standardizedFileURL.path == home.url.path,
              let credential = unit.credential(MasterKey.credentialName)
        else { return nil }
        let (directive, source) = (credential.directive, credential.source)
        let name = "masterKey"
        let declared = "keymgr.service loads it from \(source) (\(directive)= in \(unit.path))"
        var info = stat()
        guard stat(source, &info) == 0 else {
            return DoctorCheck(name, ok: false, "the master key is missing: \(declared), which does not exist, so the "
                + "agent cannot start", fix: "restore \(source) from its backup (`systemd-creds encrypt "
                + "--name=\(MasterKey.credentialName) KEYFILE \(source)` makes it from the key file)")
        }
        // An encrypted credential is sealed (to the host key or the TPM); a plain one is the key itself.
        let forbidden: mode_t = directive == "LoadCredentialEncrypted" ? 0o022 : 0o077
        if info.st_uid != 0 || info.st_mode & forbidden != 0 {
            return DoctorCheck(name, ok: false, "\(declared); it belongs to uid \(info.st_uid) with mode "
                + "\(String(info.st_mode & 0o777, radix: 8)): someone other than root could "
                + (forbidden == 0o077 ? "read or " : "") + "replace it", fix: "run `chown 0 \(source) && chmod 600 \(source)`")
        }
        return DoctorCheck(name, ok: true, "\(declared), root's alone; only keymgr.service sees it decrypted, so whether "
            + "it opens this store (and the sync, server and TPM checks that need it) is seen through the agent: run "
            + "`keymgr doctor` through the agent as an administrator")
    }

    /// The WAL's size and the free space on the home's file system.
    static func disk(_ home: StoreHome) -> DoctorCheck {
        var wal = stat()
        let walSize = stat(home.databaseURL.path + "-wal", &wal) == 0 ? Int64(wal.st_size) : 0
        if walSize > largestWAL {
            return DoctorCheck("disk", ok: false, "the write-ahead log \(home.databaseURL.path)-wal has grown to "
                + "\(walSize >> 20) MiB (a reader kept it from being folded back)",
                fix: "stop whatever keeps the store open for long (an old `keymgr agent`?); the next write folds it back")
        }
        var space = statvfs()
        guard statvfs(home.url.path, &space) == 0 else {
            return DoctorCheck("disk", ok: false, "cannot read the free space of \(home.url.path): \(String(cString: strerror(errno)))",
                               fix: "check the file system the home is on")
        }
        let free = UInt64(space.f_bavail) * UInt64(space.f_frsize)
        if free < minimumFreeBytes {
            return DoctorCheck("disk", ok: false, "only \(free >> 20) MiB are free where the store is",
                               fix: "free space on that file system (writes fail when it is full; archive the audit log "
                                + "with `keymgr audit archive`)")
        }
        return DoctorCheck("disk", ok: true, "WAL \(walSize >> 10) KiB, \(free >> 20) MiB free")
    }

    /// The last sync's age and result, when a server is configured.
    static func sync(_ manager: KeyManager, now: Date) -> DoctorCheck {
        do {
            guard try !manager.serverProfiles().isEmpty else {
                return DoctorCheck("sync", ok: true, "no server configured: nothing to sync")
            }
            guard let last = try manager.lastSyncRecord(), let finished = last.finishedAt else {
                return DoctorCheck("sync", ok: false, "a server is configured but no sync has finished yet",
                                   fix: "run `keymgr sync`, and enable the timer: `systemctl enable --now keymgr-sync.timer`")
            }
            let age = now.timeIntervalSince(finished)
            if age > 4 * syncInterval {
                return DoctorCheck("sync", ok: false, "the last sync finished \(Int(age / 60)) minutes ago (the timer runs "
                    + "every \(Int(syncInterval / 60))): the timer is not running or every run fails",
                    fix: "check `systemctl status keymgr-sync.timer keymgr-sync.service`")
            }
            if last.errors > 0 {
                // Through the agent a person reads the errors of the users they may see only, never another's.
                let visible = try manager.usersInScope()
                let errors = ((try? JSONDecoder().decode([[String: String]].self, from: Data(last.errorSummary.utf8))) ?? [])
                    .filter { visible?.contains($0["userId"] ?? "") ?? true }
                    .map { "\($0["userId"] ?? "?"): \($0["message"] ?? $0["code"] ?? "?")" }
                return DoctorCheck("sync", ok: false, "the last sync could not reconcile \(last.errors) user(s)"
                    + (errors.isEmpty ? "" : ": " + errors.joined(separator: "; ")),
                    fix: visible == nil ? "run `keymgr sync --json` and read its errors"
                        : "ask the device's administrator to look at the sync's errors")
            }
            return DoctorCheck("sync", ok: true, "the last sync finished \(Int(age / 60)) minutes ago without errors")
        } catch {
            return DoctorCheck("sync", ok: false, "cannot read the sync state: \(error)", fix: "run `keymgr audit verify`")
        }
    }

    /// A TPM store's TPM: reachable, not locked out, not reached through a network TCTI. Only a capability query is
    /// sent: nothing DA-protected is used.
    static func tpm(_ manager: KeyManager) -> DoctorCheck? {
        do {
            guard let status = try manager.tpmStatus() else { return nil }
            if let warning = TCTIReach.warning(status.tcti) {
                return DoctorCheck("tpm", ok: false, warning, fix: "re-initialise on a Unix-socket TCTI (swtpm:path=… in a 0700 directory)")
            }
            if status.inLockout {
                return DoctorCheck("tpm", ok: false, "the TPM at \(status.tcti) is in dictionary-attack lockout "
                    + "(\(status.failures) failures of \(status.maxTries)): PIN keys refuse until it lifts",
                    fix: "wait for it to lift, or run `keymgr tpm reset-lockout`")
            }
            if let replaced = try manager.tpmReplacement() {
                let keys = replaced.unusableKeys.map { "\($0.kid.prefix(8)) (\($0.userId))" }
                return DoctorCheck("tpm", ok: false, "\(replaced.why): \(keys.count) key\(keys.count == 1 ? " is" : "s are") "
                    + "unusable\(keys.isEmpty ? "" : " (" + keys.joined(separator: ", ") + ")")",
                    fix: manager.context.scope?.coversAllUsers == false ? "ask an administrator to recover the TPM"
                        : "run `keymgr tpm recover` (revokes them), then bind their users again")
            }
            return DoctorCheck("tpm", ok: true, "the TPM at \(status.tcti) answers; DA counter \(status.failures) of \(status.maxTries)")
        } catch let failure as KeyManagerError {
            return DoctorCheck("tpm", ok: false, failure.message, fix: "start the TPM (or its resource manager) at the store's TCTI")
        } catch {
            return DoctorCheck("tpm", ok: false, "\(error)", fix: "start the TPM (or its resource manager) at the store's TCTI")
        }
    }
}

extension KeyManager {
    /// The newest sync run's record (its time, counts and errors), nil before the first.
    func lastSyncRecord() throws -> SyncStateRecord? { try read { try $0.lastSync() } }
}
