import AgentWire
import CAgentSocket
import Foundation
import KeyManager

/// The agent's parent process: one thread, one poll loop. It accepts, reads the caller's credentials from the
/// kernel, enforces the limits, and forks one worker per connection (`AgentWorker`). It never reads a request
/// itself, so a slow, dead or hostile client only ever holds its own worker.
///
/// It keeps each connection open beside its worker so that it sees the client hang up (the worker is then killed,
/// with its process group: a verifier it started goes too), reaps workers, and exits after `idleExit` seconds with
/// no worker. SIGTERM or SIGINT: it stops accepting and exits once the running workers are done.
final class AgentServer {
    /// How many workers may run at once, in total and for one uid; a connection beyond either is answered busy (75).
    struct Limits {
        var workers: Int
        var workersPerUser: Int
        static let standard = Limits(workers: 64, workersPerUser: 8)
    }

    private struct Worker {
        let pid: pid_t
        let connection: Int32
        let uid: UInt32
        var killed = false
    }

    /// A connection answered busy: kept (reading and dropping what the client still sends) until the client
    /// closes it or `until` passes, so the client's send does not fail before it reads the answer.
    private struct Refused {
        let connection: Int32
        let until: Double
    }

    /// The most refused connections kept at once; beyond it one is closed at once.
    static let maxRefused = 64
    static let refusedLinger: Double = 10

    private let listener: AgentListener
    private var refused: [Refused] = []
    private let limits: Limits
    private let idleExit: Int?
    /// The `--home` the agent was given, which every worker serves.
    private let home: String?
    private var workers: [Worker] = []
    /// The warm workers waiting for a connection (`AgentWarmWorker`).
    private let warm: AgentWarmPool

    /// Why the agent cannot serve (its policy does not load): every connection is answered 78 with this, at once.
    private let unavailable: String?

    init(listener: AgentListener, limits: Limits, idleExit: Int?, home: String?, warmWorkers: Int = 0,
         unavailable: String? = nil) {
        self.listener = listener
        self.unavailable = unavailable
        self.home = home
        self.limits = limits
        self.idleExit = idleExit
        self.warm = AgentWarmPool(size: unavailable == nil ? warmWorkers : 0, home: home)
    }

    /// Serves until SIGTERM/SIGINT (after the running workers finish) or until idle for `idleExit` seconds. The
    /// waiting warm workers are ended either way.
    func serve() throws {
        try AgentSignals.install()
        defer { warm.endAll() }
        var idleSince = Self.monotonicSeconds()
        while true {
            reap()
            if AgentSignals.stopping {
                listener.close()
                warm.endAll()
            } else if workers.isEmpty || warm.isEmpty {
                // Not while a request is being served, unless no warm worker waits: preparing a store is a few
                // milliseconds of CPU, which would otherwise compete with the request on a small device.
                warm.refill()
            }
            if AgentSignals.stopping && workers.isEmpty { return }
            if !workers.isEmpty { idleSince = Self.monotonicSeconds() }

            var polled = [pollfd(fd: AgentSignals.wakeRead, events: Int16(POLLIN), revents: 0)]
            let listening = !AgentSignals.stopping
            if listening { polled.append(pollfd(fd: listener.descriptor, events: Int16(POLLIN), revents: 0)) }
            let watched = workers.indices.filter { !workers[$0].killed }
            // No events asked: poll still reports POLLHUP/POLLERR, which is the client gone (not merely done sending).
            for index in watched { polled.append(pollfd(fd: workers[index].connection, events: 0, revents: 0)) }
            let lingering = polled.count
            for entry in refused { polled.append(pollfd(fd: entry.connection, events: Int16(POLLIN), revents: 0)) }

            var timeout: Int32 = refused.isEmpty ? -1 : 1000
            if let idleExit, workers.isEmpty, !AgentSignals.stopping {
                let left = Double(idleExit) - (Self.monotonicSeconds() - idleSince)
                if left <= 0 { return }
                let idle = Int32(min(left * 1000 + 1, Double(Int32.max)))
                timeout = timeout < 0 ? idle : min(timeout, idle)
            }
            let ready = poll(&polled, nfds_t(polled.count), timeout)
            if ready < 0 {
                guard errno == EINTR else {
                    throw CommandFailure(.failure, "the agent's poll failed: \(String(cString: strerror(errno)))")
                }
                continue
            }
            dropRefused(polled[lingering...].map(\.revents))
            if ready == 0 { continue }  // the idle time is checked at the top
            AgentSignals.drain()

            let offset = listening ? 2 : 1
            for (position, index) in watched.enumerated()
            where polled[offset + position].revents & Int16(POLLHUP | POLLERR) != 0 {
                // The client hung up before its answer: nobody waits for this worker's work.
                kill(-workers[index].pid, SIGKILL)
                kill(workers[index].pid, SIGKILL)
                workers[index].killed = true
            }
            if listening, polled[1].revents & Int16(POLLIN) != 0 { acceptAll() }
        }
    }

    /// Accepts every pending connection.
    private func acceptAll() {
        while true {
            // accept4 is not in Swift's Glibc module; one thread, so nothing can exec between accept and fcntl.
            let connection = accept(listener.descriptor, nil, nil)
            if connection < 0 {
                if errno == EINTR { continue }
                return  // EAGAIN: none left; anything else (EMFILE, ECONNABORTED): try again on the next poll
            }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            // Blocking in the worker (the listener's O_NONBLOCK is not inherited on Linux, but say so).
            _ = fcntl(connection, F_SETFL, fcntl(connection, F_GETFL) & ~O_NONBLOCK)
            admit(connection)
        }
    }

    /// Forks a worker for `connection`, or answers busy when the limits are reached.
    private func admit(_ connection: Int32) {
        var uid: UInt32 = 0, gid: UInt32 = 0, pid: Int32 = 0
        var list: UnsafeMutablePointer<UInt32>?
        var count = 0
        guard agent_socket_peer_credentials(connection, &uid, &gid, &pid) == 0,
              agent_socket_peer_groups(connection, &list, &count) == 0 else {
            close(connection)
            return
        }
        let groups = list.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? []
        free(list)

        // A worker that has answered may not have been reaped yet, and one whose client hung up is ending: neither
        // holds a place, or a request right after another's answer would be refused busy for it.
        reap()
        endAbandoned()
        if let unavailable {
            refuse(connection, status: FailureCode.config.exitStatus, code: FailureCode.config.rawValue, message: unavailable)
            return
        }
        let counted = workers.filter { !$0.killed }
        let running = counted.count
        let mine = counted.filter { $0.uid == uid }.count
        if running >= limits.workers || mine >= limits.workersPerUser {
            let who = running >= limits.workers ? "the agent" : "uid \(uid)"
            refuse(connection, status: FailureCode.busy.exitStatus, code: FailureCode.busy.rawValue,
                   message: "\(who) already has \(running >= limits.workers ? running : mine) requests running: try again in a moment")
            return
        }

        if let handed = warm.handOver(connection: connection, uid: uid, gid: gid, pid: pid, groups: groups) {
            workers.append(Worker(pid: handed, connection: connection, uid: uid))
            return
        }
        let child = fork()
        if child == 0 {
            AgentWorker.serve(connection: connection, uid: uid, gid: gid, pid: pid, groups: groups, home: home)
        }
        if child < 0 {
            let answer = AgentWorker.frame(status: FailureCode.busy.exitStatus, error: (
                code: FailureCode.busy.rawValue, message: "the agent cannot start a worker now: try again in a moment"))
            _ = answer.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
            close(connection)
            return
        }
        // Its own process group from the parent's side too, so a kill right after the fork reaches it.
        _ = setpgid(child, child)
        workers.append(Worker(pid: child, connection: connection, uid: uid))
    }

    /// Answers `connection` with `status` and an error without a worker, and keeps it (see `Refused`).
    private func refuse(_ connection: Int32, status: Int32, code: String, message: String) {
        let answer = AgentWorker.frame(status: status, error: (code: code, message: message))
        _ = answer.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
        _ = shutdown(connection, Int32(SHUT_WR))
        if refused.count >= Self.maxRefused {
            close(refused.removeFirst().connection)
        }
        _ = fcntl(connection, F_SETFL, O_NONBLOCK)
        refused.append(Refused(connection: connection, until: Self.monotonicSeconds() + Self.refusedLinger))
    }

    /// Reads and drops what refused clients still send; closes those that hung up or whose time is up.
    private func dropRefused(_ events: [Int16]) {
        let now = Self.monotonicSeconds()
        var kept: [Refused] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        for (entry, revents) in zip(refused, events) {
            var open = now < entry.until
            if open, revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                let got = recv(entry.connection, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR) { open = false }
            }
            if open { kept.append(entry) } else { close(entry.connection) }
        }
        refused = kept
    }

    /// Collects every worker that has exited and closes its connection.
    private func reap() {
        while true {
            var status: Int32 = 0
            let pid = waitpid(-1, &status, WNOHANG)
            guard pid > 0 else { return }
            if let index = workers.firstIndex(where: { $0.pid == pid }) {
                close(workers[index].connection)
                workers.remove(at: index)
            } else {
                warm.exited(pid)  // killed while waiting: `refill` forks another
            }
        }
    }

    /// Kills every worker whose client has hung up (as the poll loop does when it sees it).
    private func endAbandoned() {
        let watched = workers.indices.filter { !workers[$0].killed }
        guard !watched.isEmpty else { return }
        var polled = watched.map { pollfd(fd: workers[$0].connection, events: 0, revents: 0) }
        guard poll(&polled, nfds_t(polled.count), 0) > 0 else { return }
        for (position, index) in watched.enumerated() where polled[position].revents & Int16(POLLHUP | POLLERR) != 0 {
            kill(-workers[index].pid, SIGKILL)
            kill(workers[index].pid, SIGKILL)
            workers[index].killed = true
        }
    }

    static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}

/// SIGCHLD, SIGTERM and SIGINT turned into a byte on a pipe the poll loop watches (the self-pipe pattern).
enum AgentSignals {
    nonisolated(unsafe) static var wakeRead: Int32 = -1
    nonisolated(unsafe) static var wakeWrite: Int32 = -1
    nonisolated(unsafe) private static var stopRequested: sig_atomic_t = 0

    static var stopping: Bool { stopRequested != 0 }

    static func install() throws {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0,
              ends.allSatisfy({ fcntl($0, F_SETFD, FD_CLOEXEC) == 0 && fcntl($0, F_SETFL, O_NONBLOCK) == 0 }) else {
            throw CommandFailure(.failure, "cannot make the agent's signal pipe: \(String(cString: strerror(errno)))")
        }
        wakeRead = ends[0]
        wakeWrite = ends[1]
        _ = signal(SIGPIPE, SIG_IGN)
        _ = signal(SIGCHLD) { _ in AgentSignals.wake() }
        for stop in [SIGTERM, SIGINT] {
            _ = signal(stop) { _ in
                AgentSignals.stopRequested = 1
                AgentSignals.wake()
            }
        }
    }

    /// Async-signal-safe: one write.
    static func wake() {
        let saved = errno
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        errno = saved
    }

    static func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &buffer, buffer.count) > 0 {}
    }

    /// The worker: the dispositions keymgr has when run directly, and none of the parent's pipe.
    static func resetInWorker() {
        for signal in [SIGPIPE, SIGCHLD, SIGTERM, SIGINT] { _ = Foundation.signal(signal, SIG_DFL) }
        close(wakeRead)
        close(wakeWrite)
    }
}
