import Foundation
import KeyManager
import Logging
import ServerClients

/// How a sync run behaves.
public struct SyncOptions: Sendable {
    /// Plan and report, write nothing anywhere.
    public var dryRun = false
    /// Delete orphan records of this device from the server (rule 4).
    public var pruneOrphans = false
    /// Rule 7: the share of active keys one run may revoke without `force`.
    public var maxRevokePercent: Double = 20
    public var force = false
    /// Users listed at once.
    public var concurrency = 8
    /// Users whose local changes commit in one transaction (one sync of the WAL for the lot).
    public var batchSize = 256

    public init() {}
}

/// What a sync run did (or, with `dryRun`, would do).
public struct SyncReport: Sendable, Equatable {
    /// A user the run could not reconcile: the code and message of the error.
    public typealias UserError = SyncSummary.UserError

    public var dryRun: Bool
    /// Users whose listing was asked for.
    public var users = 0
    /// Active keys the server lists that needed no change.
    public var inSync = 0
    /// Kids first seen on the server in this run.
    public var registered: [String] = []
    /// Kids revoked here because the server no longer holds them.
    public var revoked: [String] = []
    /// Kids recorded as deleted on the server (deleted by this run or found gone).
    public var serverDeleted: [String] = []
    /// Kids of records of this device that this store never held.
    public var orphans: [String] = []
    public var errors: [UserError] = []
    /// Rows the reconciliation wrote to the store (the run's own bookkeeping row aside).
    public var writes: Int { writesByKind.total }
    /// Those rows by what they record.
    public var writesByKind = SyncWrites()
    /// Usable keys of this device the server does not hold after this run (bound here without a journey, so never
    /// registered): the server cannot check their signatures.
    public var unregistered: [String] = []
    /// Rule 7 stopped the run: nothing was applied.
    public var safetyValveTripped = false
    /// When the valve trips: how many revocations were planned and how many are allowed.
    public var plannedRevocations = 0
    public var revocationLimit = 0
    /// The `maxRevokePercent` the run was given (the valve's message names it).
    public var maxRevokePercent: Double = 20
    /// The server keeps no device registry (an OAuth dialect): there were no device bindings to reconcile.
    public var noDeviceRegistry = false
    /// Users whose client registration the server no longer knows (rule 5): registration, tokens and DPoP key wiped.
    public var registrationsWiped: [String] = []
    /// How many client registrations rule 5 read (each failed read is one entry of `errors`).
    public var registrationsChecked = 0
    /// Users whose registration access token the server refused (400 `access_denied` or 403) in an earlier run: not
    /// read again until `keymgr dcr forget` or a new registration.
    public var registrationsRefused: [String] = []
    /// The user id of each kid named in `registered`, `revoked` and `serverDeleted`.
    public var owners: [String: String] = [:]

    /// An empty report: a run that had nothing to reconcile.
    public init(dryRun: Bool) {
        self.dryRun = dryRun
    }
}

/// One user's plan, with the kids it would mark registered (what a dry run reports).
private struct PlannedUser: Sendable {
    var plan: UserSyncPlan
    var wouldRegister: [String]
}

/// Reconciles the local keys with the server's registered devices (docs/sync.md, rules 1–4 and 6–10).
public struct SyncService: Sendable {
    public let manager: KeyManager
    let connection: ServerConnection
    /// The store's home: registration reads (rule 5) take the per-user lock there that refreshes take.
    let home: StoreLocation
    let logger: Logger

    public init(manager: KeyManager, connection: ServerConnection, home: StoreLocation, logger: Logger) {
        self.manager = manager
        self.connection = connection
        self.home = home
        self.logger = logger
    }

    /// Runs one sync. The caller holds the `SyncLease`.
    /// - Parameter progress: called with (users done, users in all) as listings arrive.
    public func run(_ options: SyncOptions, progress: @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> SyncReport {
        var report = try await reconcile(options, progress: progress)
        report.owners = try owners(of: report)
        return report
    }

    /// The user id of each kid the report names as registered, revoked or deleted on the server.
    private func owners(of report: SyncReport) throws -> [String: String] {
        let named = Set(report.registered + report.revoked + report.serverDeleted)
        guard !named.isEmpty else { return [:] }
        var owners: [String: String] = [:]
        try manager.forEachKey(userId: nil, statuses: Set(KeyStatus.allCases)) { key in
            if named.contains(key.kid) { owners[key.kid] = key.userId }
        }
        return owners
    }

    private func reconcile(_ options: SyncOptions, progress: @Sendable (Int, Int) -> Void) async throws -> SyncReport {
        guard let devices = try connection.deviceClient() else {
            // An OAuth server keeps no device registry: only its registrations are checked (rule 5).
            var report = SyncReport(dryRun: options.dryRun)
            report.noDeviceRegistry = true
            try await checkRegistrations(&report, options)
            return report
        }
        let startedAt = Date()
        let identity = try manager.deviceIdentity()
        // One streaming pass over the keys, holding none of them: the users worth asking about, every kid this store
        // ever held (rule 4) and the active keys (rule 7). The keys themselves are read again a slice of users at a
        // time as their listings are asked for, so memory does not grow with the keys of the other users.
        var users = Set<String>()
        var kids = Set<String>()
        var activeKeys = 0
        var unregistered: [String] = []
        try manager.forEachKey(userId: nil, statuses: Set(KeyStatus.allCases), verified: true) { key in
            kids.insert(key.kid)
            if key.status == .active { activeKeys += 1 }
            if key.serverState == .unregistered && KeyStatus.usable.contains(key.status) { unregistered.append(key.kid) }
            if Reconciler.isWorthReconciling(key) { users.insert(key.userId) }
        }
        let userIds = users.sorted()
        users = []
        let knownKids = kids
        logger.debug("reconciling users with the server", metadata: [
            "users": .stringConvertible(userIds.count), "server": .string(connection.settings.baseURL.absoluteString),
        ])

        // Listings, a bounded number at a time; one user's failure is that user's alone (rule 6). Only plans that
        // change something (or failed) are kept until rule 7 has seen them all; in-sync users leave only a count.
        var plans: [PlannedUser] = []
        var inSync = 0
        // The keys of the next slice of users, read together when the previous slice has been handed out.
        var slice: [String: [UserKey]] = [:]
        let sliceSize = max(64, options.batchSize)
        try await withThrowingTaskGroup(of: PlannedUser.self) { group in
            var next = 0
            func schedule() throws {
                guard next < userIds.count else { return }
                if next % sliceSize == 0 {
                    slice = try manager.keys(of: Array(userIds[next..<min(next + sliceSize, userIds.count)]))
                }
                let userId = userIds[next]
                next += 1
                let keys = slice.removeValue(forKey: userId) ?? []
                group.addTask {
                    let listing: Result<[ServerDevice], TransportError>
                    do {
                        listing = .success(try await devices.listDevices(userId: userId))
                    } catch let failure as TransportError {
                        listing = .failure(failure)
                    } catch {
                        listing = .failure(TransportError(.unavailable, "\(error)"))
                    }
                    let plan = Reconciler.plan(userId: userId, localKeys: keys, listing: listing,
                                               deviceId: identity.deviceId, knownKids: knownKids)
                    let unregistered = Set(keys.filter { $0.serverState == .unregistered }.map(\.kid))
                    return PlannedUser(plan: plan, wouldRegister: plan.changes.listed.map(\.kid).filter(unregistered.contains))
                }
            }
            for _ in 0..<max(1, options.concurrency) { try schedule() }
            var done = 0
            while let planned = try await group.next() {
                done += 1
                inSync += planned.plan.inSync
                if planned.plan.error != nil || !planned.plan.isEmpty { plans.append(planned) }
                progress(done, userIds.count)
                try schedule()
            }
        }
        plans.sort { $0.plan.userId < $1.plan.userId }

        var report = SyncReport(dryRun: options.dryRun)
        // What is still unregistered once this run's registrations (or, dry, the planned ones) are counted.
        func unregisteredAfter(_ report: SyncReport) -> [String] {
            let registered = Set(report.registered)
            return unregistered.filter { !registered.contains($0) }.sorted()
        }
        report.users = userIds.count
        report.inSync = inSync
        for planned in plans {
            report.orphans += planned.plan.orphans.map(\.kid)
            if let error = planned.plan.error {
                report.errors.append(.init(userId: planned.plan.userId, error))
            }
        }

        // Rule 7: too many revocations at once looks like a server fault, not a wave of stolen devices.
        let planned = plans.reduce(0) { $0 + $1.plan.changes.revokedByServer.count }
        report.plannedRevocations = planned
        report.revocationLimit = Reconciler.revocationLimit(activeKeys: activeKeys, percent: options.maxRevokePercent)
        report.maxRevokePercent = options.maxRevokePercent
        if planned > report.revocationLimit && !options.force {
            // Nothing is applied; the report lists what the valve held back.
            report.safetyValveTripped = true
            report.revoked = plans.flatMap(\.plan.changes.revokedByServer)
            report.unregistered = unregisteredAfter(report)
            return report
        }

        if options.dryRun {
            for planned in plans where planned.plan.error == nil {
                report.registered += planned.wouldRegister
                report.revoked += planned.plan.changes.revokedByServer
                report.serverDeleted += planned.plan.changes.deletedOnServer + planned.plan.deleteOnServer.map(\.kid)
            }
            report.unregistered = unregisteredAfter(report)
            return report
        }

        // A batch of users at a time: each user's server deletions, then the batch's local changes in one
        // transaction. A user whose deletion failed gets no local change (rule 6); the next run retries it.
        let applicable = plans.map(\.plan).filter { $0.error == nil && !$0.isEmpty }
        plans = []
        var start = 0
        while start < applicable.count {
            let batch = applicable[start..<min(start + max(1, options.batchSize), applicable.count)]
            start += batch.count
            var ready: [ServerChanges] = []
            for plan in batch {
                do {
                    ready.append(try await changeServer(plan, devices: devices, options: options))
                } catch let failure as any KeymgrFailure where failure.code != .busy {
                    // The server refused a deletion, or the store a re-read before pruning: this user's alone.
                    report.errors.append(.init(userId: plan.userId, failure))
                }
            }
            try applyLocally(ready, to: &report)
        }
        try await checkRegistrations(&report, options)
        report.unregistered = unregisteredAfter(report)
        try record(report, serverName: connection.settings.name, startedAt: startedAt)
        return report
    }

    /// A user's changes at the server (rule 3's deletions, rule 4's pruning, and for a revocation the client
    /// registration); returns the local changes that follow, to be applied only if all of these succeeded.
    private func changeServer(_ plan: UserSyncPlan, devices: any DeviceRegistry, options: SyncOptions) async throws -> ServerChanges {
        var changes = plan.changes
        for device in plan.deleteOnServer {
            try await devices.deleteDevice(userId: plan.userId, uuid: device.uuid)
            changes.deletedOnServer.append(device.kid)
        }
        if options.pruneOrphans && !plan.orphans.isEmpty {
            // A key bound (and registered by its journey) since the plan read the user's keys is no orphan.
            let held = Set(try manager.keys(userId: plan.userId, statuses: Set(KeyStatus.allCases)).map(\.kid))
            for orphan in plan.orphans where !held.contains(orphan.kid) {
                try await devices.deleteDevice(userId: plan.userId, uuid: orphan.uuid)
                changes.prunedOrphans.append(orphan.kid)
            }
        }
        if !changes.revokedByServer.isEmpty { await deleteClient(of: plan.userId) }
        return changes
    }

    /// Applies a batch's local changes in one transaction. A batch the store refuses (a tampered row, say) is
    /// applied again one user at a time, so that one user's failure stays that user's; `busy` ends the run.
    private func applyLocally(_ batch: [ServerChanges], to report: inout SyncReport) throws {
        func add(_ outcome: ServerChangesOutcome) {
            report.registered += outcome.registered
            report.revoked += outcome.revoked
            report.serverDeleted += outcome.serverDeleted
            report.writesByKind = report.writesByKind + outcome.writesByKind
        }
        do {
            try manager.apply(batch).forEach(add)
        } catch let error as KeyManagerError where error.code != .busy && batch.count > 1 {
            logger.debug("a batch of local changes failed; applying it one user at a time", metadata: [
                "users": .stringConvertible(batch.count), "error": .string(error.message),
            ])
            for changes in batch {
                do {
                    add(try manager.apply(changes))
                } catch let error as KeyManagerError where error.code != .busy {
                    report.errors.append(.init(userId: changes.userId, error))
                }
            }
        } catch let error as KeyManagerError where error.code != .busy {
            report.errors.append(.init(userId: batch[0].userId, error))
        }
    }

    /// Rule 2's companion: the server revoked a binding of this device, and the user's client registration belongs to
    /// this device too. Deleting the client at the server (RFC 7592) is best effort; `apply` wipes it here in any case,
    /// so a device that lost its binding never keeps a usable client.
    private func deleteClient(of userId: String) async {
        do {
            let service = RegistrationService(manager: manager, connection: connection, home: home, logger: logger)
            if try await service.deleteAtServer(userId: userId) {
                logger.debug("deleted the client registration at the server", metadata: ["user": .string(userId)])
            }
        } catch {
            logger.warning("could not delete the client registration at the server; it is wiped here all the same",
                           metadata: ["user": .string(userId), "error": .string("\(error)")])
        }
    }

    /// Rule 5: each registration's management GET; a 401 wipes the registration, its tokens and DPoP key. A dry run
    /// skips it (a read rotates Curity's credentials, which must then be stored).
    private func checkRegistrations(_ report: inout SyncReport, _ options: SyncOptions) async throws {
        let registrations = try manager.registrations()
        guard !options.dryRun, !registrations.isEmpty else { return }
        let outcome = await RegistrationService(manager: manager, connection: connection, home: home, logger: logger).checkAll()
        report.registrationsChecked = outcome.checked
        report.registrationsWiped = outcome.wiped
        report.registrationsRefused = outcome.refused
        report.writesByKind.registrationsWiped += outcome.wiped.count
        report.errors += outcome.errors
    }

    private func record(_ report: SyncReport, serverName: String, startedAt: Date) throws {
        try manager.recordSync(SyncSummary(
            serverName: serverName, startedAt: startedAt, finishedAt: Date(), users: report.users, inSync: report.inSync,
            registered: report.registered.count, revoked: report.revoked.count, serverDeleted: report.serverDeleted.count,
            orphans: report.orphans.count, errors: report.errors))
    }
}
