import Foundation
import KeyManager
import Logging
import ServerClients

/// One device binding the server lists for a user, as an administrator sees it.
public struct FleetBinding: Sendable, Equatable {
    public var userId: String
    /// The binding's `uuid` (`_id`), which is its key's kid.
    public var uuid: String
    public var kid: String
    public var deviceId: String?
    public var deviceName: String?
    public var createdAt: Date?
    public var lastAccessAt: Date?
    /// Whether the binding belongs to this device (its deviceId is this store's).
    public var thisDevice: Bool

    public init(userId: String, device: ServerDevice, thisDeviceId: String) {
        self.userId = userId
        uuid = device.uuid
        kid = device.kid
        deviceId = device.deviceId
        deviceName = device.deviceName
        createdAt = device.createdAt
        lastAccessAt = device.lastAccessAt
        thisDevice = device.deviceId == thisDeviceId
    }

    /// When the server last saw the binding used: its last access, else its creation.
    public var lastSeenAt: Date? { lastAccessAt ?? createdAt }
}

/// Several users' bindings, listed a bounded number of users at a time.
public struct FleetListing: Sendable, Equatable {
    /// Users whose listing was asked for.
    public var users = 0
    /// Bindings of the users whose listing succeeded, by user id, then creation time.
    public var bindings: [FleetBinding] = []
    /// Users whose listing failed, with the failure's code and message; nothing of theirs is in `bindings`.
    public var errors: [SyncSummary.UserError] = []
    /// The users whose listing was asked for, in the order asked.
    public var userIds: [String] = []

    public init() {}

    /// The listing judged, for every front end alike: nil when every user's listing succeeded; `whole` when none did
    /// (nothing worth showing: the first failure is the command's); else the failure that follows the partial listing.
    public var failure: (error: SyncError, whole: Bool)? {
        guard let first = errors.first else { return nil }
        let code = first.code
        if errors.count == users { return (SyncError(code, first.message), true) }
        return (SyncError(code, "the bindings of \(errors.count) of \(users) users could not be listed: "
                                    + "the listing above is incomplete"), false)
    }
}

/// How an administrator names the device to revoke.
public enum DeviceSelector: Sendable, Equatable {
    /// `--device UUID`: one binding, by its uuid (= kid), or a unique prefix of at least 8 characters.
    case binding(String)
    /// `--device-id ID`: every binding of the user with this device id.
    case deviceId(String)

    /// How the command line said it, for messages and the audit log.
    public var description: String {
        switch self {
        case .binding(let uuid): "--device \(uuid)"
        case .deviceId(let id): "--device-id \(id)"
        }
    }
}

/// What `admin revoke` will do, worked out from a complete listing before anything changes.
public struct DeviceRevocationPlan: Sendable, Equatable {
    public var userId: String
    public var selector: DeviceSelector
    public var reason: DeviceRevocationReason
    /// The device id of the bindings, when known.
    public var deviceId: String?
    /// The device's name as the server lists it, when known.
    public var deviceName: String?
    /// Server bindings to delete.
    public var bindings: [FleetBinding] = []
    /// Whether the device is this one.
    public var thisDevice = false
    /// This device's usable keys of the user to revoke here.
    public var localKids: [String] = []
    /// Kids of this device's keys the complete listing does not hold (nothing to delete there for them).
    public var notOnServer: Set<String> = []
    /// The user has a client registration here (wiped when the device is this one).
    public var hasRegistration = false

    /// Whether carrying out the plan would change anything on the server or here.
    public var isEmpty: Bool { bindings.isEmpty && (!thisDevice || (localKids.isEmpty && !hasRegistration)) }
}

/// What `admin revoke` did.
public struct DeviceRevocationReport: Sendable, Equatable {
    public var plan: DeviceRevocationPlan
    /// Binding uuids this run deleted on the server.
    public var deletedOnServer: [String] = []
    /// Binding uuids the server no longer had when asked to delete them (404).
    public var alreadyGone: [String] = []
    /// The user's OAuth client was deleted at the server (RFC 7592).
    public var clientDeleted = false
    /// The local part: keys revoked, tokens and registrations wiped.
    public var local = DeviceRevocationOutcome()

    /// Whether this run changed anything anywhere (a repeated revocation changes nothing).
    public var changedSomething: Bool {
        !deletedOnServer.isEmpty || clientDeleted || !local.revokedHere.isEmpty
            || local.tokenSetsWiped + local.registrationsWiped > 0
    }
}

/// An administrator's view of the fleet on the identity server: list bindings, find stale ones, revoke a device.
///
/// Needs a dialect with a device registry (PingAM); every change is audited through the facade with the acting OS
/// user and the reason.
public struct AdminService: Sendable {
    public let manager: KeyManager
    let connection: ServerConnection
    /// The store's home: deleting a client registration takes the per-user lock there that refreshes take.
    let home: StoreLocation
    let logger: Logger

    public init(manager: KeyManager, connection: ServerConnection, home: StoreLocation,
                logger: Logger = KeyManager.silentLogger) {
        self.manager = manager
        self.connection = connection
        self.home = home
        self.logger = logger
    }

    /// The device REST, or `unsupported` for a dialect without a device registry.
    func deviceClient() throws -> any DeviceRegistry {
        guard let client = try connection.deviceClient() else {
            throw SyncError(.unsupported, "the configured server is \(connection.settings.dialect.rawValue), which keeps "
                + "no device registry: there are no bindings to list or revoke. Revoke the user's client at the server "
                + "(or `keymgr dcr delete --user ID` for a client this device registered), or configure a PingAM server "
                + "with `keymgr server set --dialect pingam …`")
        }
        return client
    }

    /// Every user this store knows, in user id order.
    public func knownUsers() throws -> [String] {
        try manager.users().map(\.userId).sorted()
    }

    /// The bindings of `userIds`, `concurrency` users at a time; one user's failure is that user's alone.
    /// - Parameter progress: called with (users done, users in all) as listings arrive.
    public func listBindings(userIds: [String], concurrency: Int = 8,
                             progress: @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> FleetListing {
        let devices = try deviceClient()
        let deviceId = try manager.deviceIdentity().deviceId
        var listing = FleetListing()
        listing.users = userIds.count
        listing.userIds = userIds
        var done = 0
        try await withThrowingTaskGroup(of: (String, Result<[ServerDevice], TransportError>).self) { group in
            var next = 0
            func schedule() {
                guard next < userIds.count else { return }
                let userId = userIds[next]
                next += 1
                group.addTask {
                    do {
                        return (userId, .success(try await devices.listDevices(userId: userId)))
                    } catch let failure as TransportError {
                        return (userId, .failure(failure))
                    } catch {
                        return (userId, .failure(TransportError(.unavailable, "\(error)")))
                    }
                }
            }
            for _ in 0..<max(1, concurrency) { schedule() }
            while let (userId, result) = try await group.next() {
                switch result {
                case .success(let listed):
                    listing.bindings += listed.map { FleetBinding(userId: userId, device: $0, thisDeviceId: deviceId) }
                case .failure(let failure):
                    listing.errors.append(.init(userId: userId, failure))
                }
                done += 1
                progress(done, userIds.count)
                schedule()
            }
        }
        listing.bindings.sort { ($0.userId, $0.createdAt ?? .distantPast, $0.uuid) < ($1.userId, $1.createdAt ?? .distantPast, $1.uuid) }
        listing.errors.sort { $0.userId < $1.userId }
        return listing
    }

    /// `admin devices`: the bindings of `user` (an id or login name), or of every known user when nil.
    public func devices(user: String?, concurrency: Int = 8,
                        progress: @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> FleetListing {
        let userIds = try user.map { [try manager.resolveUser($0)] } ?? knownUsers()
        return try await devices(userIds: userIds, single: user != nil, concurrency: concurrency, progress: progress)
    }

    /// `admin devices`: the bindings of `userIds`, audited when any user's listing succeeded.
    package func devices(userIds: [String], single: Bool, concurrency: Int = 8,
                         progress: @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> FleetListing {
        for userId in userIds { try manager.authorize(userId: userId) }
        let listing = try await listBindings(userIds: userIds, concurrency: concurrency, progress: progress)
        if listing.errors.count < listing.users {
            try manager.recordDeviceListing(userId: single ? userIds.first : nil, users: listing.users,
                                            bindings: listing.bindings.count)
        }
        return listing
    }

    /// `admin stale`: the bindings of every known user that the server has not seen used for `days` days (counted
    /// from the last access, else the creation; a binding with neither date is listed, as nothing shows it was used).
    public func stale(days: Int, now: Date = Date(), concurrency: Int = 8,
                      progress: @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> FleetListing {
        var listing = try await listBindings(userIds: try knownUsers(), concurrency: concurrency, progress: progress)
        let cutoff = now.addingTimeInterval(-Double(days) * 86_400)
        listing.bindings = listing.bindings.filter { ($0.lastSeenAt ?? .distantPast) < cutoff }
        if listing.errors.count < listing.users || listing.users == 0 {
            try manager.recordDeviceListing(userId: nil, users: listing.users, bindings: listing.bindings.count, staleDays: days)
        }
        return listing
    }

    /// Works out what revoking `selector` of `userId` would do, from the user's complete listing; changes nothing.
    /// - Throws: the transport's error when the listing fails (nothing is changed anywhere), `usage` for an
    ///   ambiguous uuid prefix.
    public func planRevocation(userId: String, selector: DeviceSelector, reason: DeviceRevocationReason) async throws -> DeviceRevocationPlan {
        try manager.authorize(userId: userId)
        let devices = try deviceClient()
        let identity = try manager.deviceIdentity()
        let listed = try await devices.listDevices(userId: userId)
            .map { FleetBinding(userId: userId, device: $0, thisDeviceId: identity.deviceId) }
        // This device's keys of the server's user: every local identity the server's path names alike (`bob` and
        // `id=bob,ou=user,…` are one user there). A key revoked here must have been on the server: its binding is in
        // the listing (deleted now), or it was registered and the complete listing no longer holds it (deleted
        // before); a key never registered is never touched.
        let segment = { (id: String) in UniversalId.idValue(id) ?? id }
        let allListedKids = Set(listed.map(\.kid))
        let localKeys = try manager.keys(userId: nil, statuses: Set(KeyStatus.allCases))
            .filter { $0.userId == userId || segment($0.userId) == segment(userId) }
        let revocable = { (key: UserKey, deleting: Set<String>) -> Bool in
            guard KeyStatus.usable.contains(key.status) else { return false }
            if deleting.contains(key.kid) { return true }
            return key.userId == userId && key.serverState != .unregistered && !allListedKids.contains(key.kid)
        }
        var plan = DeviceRevocationPlan(userId: userId, selector: selector, reason: reason)
        switch selector {
        case .deviceId(let text):
            // A whole device id or a unique prefix of one the server lists for the user (or of this device's).
            let matches = Self.matching(text, in: listed.compactMap(\.deviceId) + [identity.deviceId])
            guard matches.count <= 1 else {
                throw SyncError(.usage, "more than one device of \(userId) has an id starting with \(text): give more "
                    + "of it, e.g. one of \(matches.joined(separator: ", "))")
            }
            let id = matches.first ?? text
            plan.deviceId = id
            plan.bindings = listed.filter { $0.deviceId == id }
            plan.thisDevice = id == identity.deviceId
            if plan.thisDevice {
                let deleting = Set(plan.bindings.map(\.kid))
                plan.localKids = localKeys.filter { revocable($0, deleting) }.map(\.kid)
            }
        case .binding(let text):
            let matches = Self.matching(text, in: listed.map(\.uuid))
            guard matches.count <= 1 else {
                throw SyncError(.usage, "more than one binding of \(userId) starts with \(text): give more of the uuid, "
                    + "e.g. one of \(matches.joined(separator: ", "))")
            }
            if let uuid = matches.first, let binding = listed.first(where: { $0.uuid == uuid }) {
                plan.bindings = [binding]
                plan.deviceId = binding.deviceId
                plan.thisDevice = binding.thisDevice || localKeys.contains { $0.kid == uuid }
                if plan.thisDevice {
                    plan.localKids = localKeys.filter { $0.kid == uuid && revocable($0, [binding.kid]) }.map(\.kid)
                }
            } else {
                // Not on the server (any more): it is this device's when a key here has that kid.
                let local = Self.matching(text, in: localKeys.map(\.kid))
                if local.count == 1, let kid = local.first {
                    plan.thisDevice = true
                    plan.deviceId = identity.deviceId
                    plan.localKids = localKeys.filter { $0.kid == kid && revocable($0, []) }.map(\.kid)
                }
            }
        }
        plan.deviceName = plan.bindings.first?.deviceName
        if plan.bindings.isEmpty && !plan.thisDevice {
            // Nothing the server lists, nothing here: "already revoked" only when this store revoked it before.
            let (text, byDeviceId) = switch selector {
            case .deviceId(let id): (id, true)
            case .binding(let uuid): (uuid, false)
            }
            guard try manager.revokedBefore(userId: userId, text: text, byDeviceId: byDeviceId) else {
                throw SyncError(.clientNotRegistered, Self.notListed(selector, userId: userId, listed: listed))
            }
        }
        if plan.thisDevice {
            let listedKids = Set(listed.map(\.kid))
            plan.notOnServer = Set(plan.localKids.filter { !listedKids.contains($0) })
            let registered = try manager.registrations().contains { $0.userId == userId }
            let tokens = try manager.tokenSet(userId: userId, serverName: connection.serverName)
            plan.hasRegistration = registered || tokens != nil
        }
        return plan
    }

    /// `admin revoke`: plans the revocation of `selector` of `user` (an id or login name), asks `confirm` when the
    /// plan changes anything (it may throw to stop; nothing has changed then), and carries the plan out.
    public func revokeDevice(user: String, selector: DeviceSelector, reason: DeviceRevocationReason,
                             confirm: @Sendable (DeviceRevocationPlan) throws -> Void = { _ in }) async throws -> DeviceRevocationReport {
        let plan = try await planRevocation(userId: try manager.resolveUser(user), selector: selector, reason: reason)
        if !plan.isEmpty { try confirm(plan) }
        return try await revoke(plan)
    }

    /// Carries out a plan: deletes the bindings on the server (404 counts as already gone); when the device is this
    /// one, deletes the user's client at the server (RFC 7592) if keymgr holds its management credential, then
    /// revokes the keys here and wipes the user's tokens, DPoP keys and registrations. Everything is audited with
    /// the acting OS user and the reason, a repeated revocation too (it changes nothing else).
    /// - Throws: a transport error part-way: what was done is audited, and the next run finishes the rest.
    public func revoke(_ plan: DeviceRevocationPlan) async throws -> DeviceRevocationReport {
        let devices = try deviceClient()
        var report = DeviceRevocationReport(plan: plan)
        var revocation = DeviceRevocation(userId: plan.userId, reason: plan.reason, selector: plan.selector.description,
                                          deviceId: plan.deviceId, thisDevice: plan.thisDevice)
        do {
            for binding in plan.bindings {
                if try await devices.deleteDevice(userId: plan.userId, uuid: binding.uuid) {
                    report.deletedOnServer.append(binding.uuid)
                } else {
                    report.alreadyGone.append(binding.uuid)
                }
            }
            if plan.thisDevice {
                let registrations = RegistrationService(manager: manager, connection: connection, home: home, logger: logger)
                report.clientDeleted = try await registrations.deleteAtServer(userId: plan.userId)
            }
        } catch let failure as any KeymgrFailure {
            revocation.deletedOnServer = report.deletedOnServer
            revocation.alreadyGone = report.alreadyGone
            revocation.failure = failure.message
            if !report.deletedOnServer.isEmpty { try manager.recordDeviceRevocation(revocation) }
            throw failure
        }
        revocation.deletedOnServer = report.deletedOnServer
        revocation.alreadyGone = report.alreadyGone
        revocation.clientDeleted = report.clientDeleted
        revocation.localKids = plan.localKids
        revocation.goneFromServer = plan.notOnServer.union(plan.bindings.map(\.kid))
        report.local = try manager.recordDeviceRevocation(revocation)
        return report
    }

    /// Says that the server lists no binding `selector` names, and what it does list for the user.
    static func notListed(_ selector: DeviceSelector, userId: String, listed: [FleetBinding]) -> String {
        let what = switch selector {
        case .deviceId(let id): "from a device \(id)"
        case .binding(let uuid): "\(uuid)"
        }
        var text = "the server lists no binding of \(userId) \(what), and this store has no record of revoking one: "
            + "nothing was changed. "
        guard !listed.isEmpty else { return text + "The server lists no binding of \(userId) at all" }
        switch selector {
        case .deviceId:
            var devices: [String] = []
            for binding in listed {
                let entry = (binding.deviceId ?? "unknown") + (binding.deviceName.map { " (\($0))" } ?? "")
                if !devices.contains(entry) { devices.append(entry) }
            }
            text += "It lists the devices \(devices.joined(separator: ", "))"
        case .binding:
            text += "It lists the bindings \(listed.map(\.uuid).joined(separator: ", "))"
        }
        return text + " (`keymgr admin devices --user \(userId) --wide`)"
    }

    /// The entries of `candidates` that `text` names: itself, else those it is a prefix of (at least 8 characters).
    static func matching(_ text: String, in candidates: [String]) -> [String] {
        if candidates.contains(text) { return [text] }
        guard text.count >= KeyManager.shortKidLength else { return [] }
        return Array(Set(candidates.filter { $0.hasPrefix(text) })).sorted()
    }
}
