import AgentWire
import CAgentSocket
import CProcessControl
import Foundation
import KeyManager
import Logging

/// The agent's warm workers: processes forked ahead of any request that open and check the store (the database,
/// the master key, the schema, the device row's MAC) while nobody waits, then each waits for ONE connection.
///
/// The agent accepts a connection, reads the caller from the kernel (SO_PEERCRED) as for a cold worker, and hands
/// the connection with that caller to a free warm worker over a `SOCK_SEQPACKET` socketpair (the descriptor with
/// SCM_RIGHTS). The worker serves that one request on the cold worker's code path (`AgentWorker.serveRequest`) and
/// exits; the agent forks another in its place. A warm worker never serves a second request, and it prepared its
/// store before any caller was known: nothing of one person reaches the next.
///
/// Before the command uses the prepared store, `KeyManager.open(prepared:…)` checks that nothing it was prepared
/// from changed (the home, the master key's source and file, the database file, the schema, the device row); if
/// anything did, the command opens the store afresh, as a cold worker does.
enum AgentWarmWorker {
    /// The store this warm worker prepared, taken by the command's first open (`openPrepared`).
    nonisolated(unsafe) private static var prepared: PreparedStore?

    /// The descriptor numbers a client's command may use (0 … `AgentWire.maximumDescriptorNumber`): held on
    /// /dev/null while the store is prepared, so that every descriptor the store opens lands above them and no
    /// descriptor the client passes is placed over one of the store's.
    static let reserved: ClosedRange<Int32> = 3...AgentWire.maximumDescriptorNumber

    /// The most supplementary groups a hand-over carries; a caller with more is served by a cold worker.
    static let maximumGroups = 1024

    // MARK: The worker

    /// The warm worker's life: prepares the store, waits on `control` for one connection, serves it, exits. Exits
    /// at once when the agent closes `control` (it stops, or ends this worker). Named `keymgr-warming` while
    /// it prepares, `keymgr-warm` while it waits and `keymgr-worker` once it serves.
    static func run(control: Int32, home: String?, environment: [String: String], policy: AgentPolicy?) -> Never {
        _ = setpgid(0, 0)
        AgentSignals.resetInWorker()
        AgentProcessName.set("keymgr-warming")
        let channel = fcntl(control, F_DUPFD_CLOEXEC, AgentWire.maximumDescriptorNumber + 1)
        guard channel >= 0 else { _exit(1) }
        close(control)
        AgentWorker.closeAll(except: [0, 1, 2, channel])

        let placeholders = reserve()
        let location = StoreLocation.resolve(explicit: home, environment: environment)
        prepared = try? KeyManager.prepare(home: location, environment: environment)
        // The store is open, all of it above the reserved numbers: the placeholders have done their work (what
        // the request opens later takes free numbers once the client's descriptors are in place, as in a cold
        // worker). Released before the store's descriptors are listed, so the listing is short.
        if placeholders.count == reserved.count {  // all of them: one call
            _ = agent_close_range(UInt32(reserved.lowerBound), UInt32(reserved.upperBound))
        } else {
            for descriptor in placeholders { close(descriptor) }
        }
        // The store's own descriptors, kept open through the request, whether or not the preparation succeeded: a
        // preparation that failed half-way (the master key refused after the database was opened) leaves SQLite's
        // files open, and SQLite shares them among the connections of this process to the same database (its locks
        // are the process's). Closed under it, the request's own open of the store fails its locks, and SQLite
        // retries for seconds before it gives up with "locking protocol".
        let store = AgentWorker.openDescriptors().filter { $0 > AgentWire.maximumDescriptorNumber && $0 != channel }

        AgentProcessName.set("keymgr-warm")
        guard let (connection, caller) = receive(channel) else { _exit(0) }
        AgentProcessName.set("keymgr-worker")  // waiting no more: serving, as a cold worker does
        close(channel)
        AgentWorker.serveRequest(connection: connection, caller: caller, home: home, environment: environment,
                                 policy: policy, keeping: store)
    }

    /// The manager on the prepared store when this process is a warm worker whose store is still what it was
    /// prepared from (`KeyManager.open(prepared:…)`); nil otherwise, and the caller opens the store as usual. Used
    /// once: a second open in the same command opens afresh.
    static func openPrepared(home: StoreLocation, context: RequestContext, environment: [String: String],
                             logger: Logger) -> KeyManager? {
        guard let store = prepared else { return nil }
        prepared = nil
        return KeyManager.open(prepared: store, home: home, context: context, environment: environment, logger: logger)
    }

    /// Puts /dev/null on every free number in `reserved`; returns the numbers so held.
    private static func reserve() -> [Int32] {
        let null = open("/dev/null", O_RDWR | O_CLOEXEC)
        guard null >= 0 else { return [] }
        var held: [Int32] = []
        for number in reserved {
            if number == null || (fcntl(number, F_GETFD) < 0 && fcntl(null, F_DUPFD_CLOEXEC, number) == number) {
                held.append(number)
            }
        }
        if !held.contains(null) { close(null) }
        return held
    }

    /// Waits for the agent's hand-over: the connection and the caller the agent read from the kernel. Nil when the
    /// agent closed the channel (or sent something else).
    private static func receive(_ channel: Int32) -> (Int32, AgentWorker.KernelCaller)? {
        var buffer = [UInt8](repeating: 0, count: 4 * (4 + maximumGroups))
        var fds: [Int32] = [-1]
        var received = 0
        var got: Int
        repeat {
            got = buffer.withUnsafeMutableBytes { agent_socket_receive(channel, $0.baseAddress, $0.count, &fds, 1, &received) }
        } while got < 0 && errno == EINTR
        guard got > 0, received == 1 else {
            if received == 1 { close(fds[0]) }
            return nil
        }
        let words = stride(from: 0, to: got - got % 4, by: 4).map { offset in
            UInt32(buffer[offset]) | UInt32(buffer[offset + 1]) << 8 | UInt32(buffer[offset + 2]) << 16
                | UInt32(buffer[offset + 3]) << 24
        }
        guard words.count >= 4, words.count == 4 + Int(words[3]) else {
            close(fds[0])
            return nil
        }
        let caller = AgentWorker.KernelCaller(uid: words[0], gid: words[1], pid: Int32(bitPattern: words[2]),
                                              groups: Array(words[4...]))
        return (fds[0], caller)
    }

    /// The hand-over message: uid, gid, pid, the number of groups, the groups; 32-bit little-endian words.
    static func message(uid: UInt32, gid: UInt32, pid: Int32, groups: [UInt32]) -> [UInt8] {
        ([uid, gid, UInt32(bitPattern: pid), UInt32(groups.count)] + groups).flatMap { word in
            [UInt8(word & 0xff), UInt8(word >> 8 & 0xff), UInt8(word >> 16 & 0xff), UInt8(word >> 24)]
        }
    }
}

/// The agent's side: the warm workers waiting for a connection.
final class AgentWarmPool {
    private struct Waiting {
        let pid: pid_t
        let channel: Int32
    }

    /// The most warm workers `--warm-workers` may ask for.
    static let maximum = 16
    static let standard = 2

    let size: Int
    private let home: String?
    private let policy: AgentPolicy?
    private let environment: [String: String]
    private var waiting: [Waiting] = []

    init(size: Int, home: String?, environment: [String: String], policy: AgentPolicy?) {
        self.environment = environment
        self.policy = policy
        self.size = size
        self.home = home
    }

    var isEmpty: Bool { waiting.isEmpty }

    /// The warm workers waiting now (each its own process group).
    var pids: [pid_t] { waiting.map(\.pid) }

    /// Forks warm workers until `size` wait. A fork that fails is tried again on the next call.
    func refill() {
        while waiting.count < size {
            var ends: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
                return
            }
            let child = fork()
            if child == 0 {
                close(ends[0])
                AgentWarmWorker.run(control: ends[1], home: home, environment: environment, policy: policy)
            }
            close(ends[1])
            guard child > 0 else {
                close(ends[0])
                return
            }
            _ = setpgid(child, child)
            waiting.append(Waiting(pid: child, channel: ends[0]))
        }
    }

    /// Hands `connection` and its caller to a waiting warm worker; returns that worker's pid, or nil when none
    /// took it (none waiting, or too many groups to carry): the agent then forks a cold worker.
    func handOver(connection: Int32, uid: UInt32, gid: UInt32, pid: Int32, groups: [UInt32]) -> pid_t? {
        guard groups.count <= AgentWarmWorker.maximumGroups else { return nil }
        let message = AgentWarmWorker.message(uid: uid, gid: gid, pid: pid, groups: groups)
        while !waiting.isEmpty {
            let worker = waiting.removeFirst()
            var descriptor = connection
            let sent = message.withUnsafeBytes { agent_socket_send(worker.channel, $0.baseAddress, $0.count, &descriptor, 1) }
            close(worker.channel)
            if sent == 0 { return worker.pid }
            // Gone (or going): it is reaped like any child.
            kill(-worker.pid, SIGKILL)
            kill(worker.pid, SIGKILL)
        }
        return nil
    }

    /// Forgets a warm worker that exited while waiting (reaped by the agent). Whether `pid` was one.
    @discardableResult
    func exited(_ pid: pid_t) -> Bool {
        guard let index = waiting.firstIndex(where: { $0.pid == pid }) else { return false }
        close(waiting[index].channel)
        waiting.remove(at: index)
        return true
    }

    /// Ends every waiting warm worker and collects it: the agent stops.
    func endAll() {
        for worker in waiting {
            close(worker.channel)  // it reads end of file and exits
            kill(-worker.pid, SIGKILL)
            kill(worker.pid, SIGKILL)
        }
        for worker in waiting {
            var status: Int32 = 0
            while waitpid(worker.pid, &status, 0) < 0, errno == EINTR {}
        }
        waiting = []
    }
}

/// The process's name as `ps`, `top` and `/proc/<pid>/comm` show it: `prctl(PR_SET_NAME)` (15 bytes), which works
/// in a process that is not dumpable, where writing /proc/self/comm is refused to anyone but root.
enum AgentProcessName {
    static func set(_ name: String) {
        _ = keymgr_set_process_name(name)
    }
}
