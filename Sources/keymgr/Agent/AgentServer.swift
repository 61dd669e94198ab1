import AgentWire
import ArgumentParser
import CAgentSocket
import CProcessControl
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

    /// A worker and everything it started: it holds its place until its process group is empty.
    private struct Worker {
        /// The worker's pid, which is also its process group's.
        let pid: pid_t
        var connection: Int32
        /// The share it counts against (`AgentServer.share(of:)`): the caller's uid, or the one for uids no user has.
        let share: UInt32
        var state: State = .serving
        /// Whether it runs at `AgentServer.yieldingNice` (it never goes back: only root may lower a nice value).
        var yielding = false

        enum State {
            /// Serving its client.
            case serving
            /// Its client hung up: the group was killed, and the worker is not yet reaped.
            case killed
            /// Reaped; what it started may not be gone yet (killed, and collected as it ends).
            case exited
        }
    }

    /// A connection accepted while the agent was full, waiting for a place (`admitQueued`).
    private struct Queued {
        let connection: Int32
        let caller: AgentWorker.KernelCaller
        let share: UInt32
        let until: Double
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
    /// The nice value of the workers of a share holding more than another share being served (`yieldCPU`).
    static let yieldingNice: Int32 = 10
    /// The most connections waiting for a place, and how long one waits before it is answered busy.
    static let maxQueued = 64
    static let queueWait: Double = 10

    private let listener: AgentListener
    private var refused: [Refused] = []
    private let limits: Limits
    private let idleExit: Int?
    /// The `--home` the agent was given, which every worker serves.
    private let home: String?
    /// The policy loaded at start, which every worker decides with (nil: the agent serves without one).
    private let policy: AgentPolicy?
    /// The agent's environment (its command's context), which every worker starts from.
    private let environment: [String: String]
    private var workers: [Worker] = []
    private var queued: [Queued] = []
    /// Connections whose caller's share is not known yet (`AgentUserDirectory`), oldest first.
    private var resolving: [Queued] = []
    private let users = AgentUserDirectory()
    /// The warm workers waiting for a connection (`AgentWarmWorker`).
    private let warm: AgentWarmPool

    /// Why the agent cannot serve (its policy does not load): every connection is answered 78 with this, at once.
    private let unavailable: String?

    /// The first-use work left to do in the agent before it forks warm workers (`AgentCommand`'s warm-up steps),
    /// each a few milliseconds: run while no request is being served, one step at a time, a new connection
    /// first. Until they are done, a connection gets a cold worker.
    private var warmUp: [() -> Void]

    /// The store's keeper's answer, when the agent serves before it came (socket activation): a byte, the store
    /// is open and checked; end of file without one, it is not (the agent stops listening and ends with 78 once
    /// its workers are done). -1 once answered, or when the agent waited for it before serving.
    private var keeper: Int32
    /// Set when the keeper reported that the store cannot be served: the agent's exit status.
    private var failure: Int32?

    init(listener: AgentListener, limits: Limits, idleExit: Int?, home: String?, environment: [String: String],
         policy: AgentPolicy? = nil, warmWorkers: Int = 0, unavailable: String? = nil, warmUp: [() -> Void] = [],
         keeper: Int32 = -1) {
        self.environment = environment
        self.warmUp = warmUp
        self.keeper = keeper
        self.policy = policy
        self.listener = listener
        self.unavailable = unavailable
        self.home = home
        self.limits = limits
        self.idleExit = idleExit
        self.warm = AgentWarmPool(size: unavailable == nil ? warmWorkers : 0, home: home, environment: environment,
                                  policy: policy)
    }

    /// Serves until SIGTERM/SIGINT (after the running workers finish) or until idle for `idleExit` seconds. The
    /// waiting warm workers are ended either way.
    func serve() throws {
        try AgentSignals.install()
        // Whatever a worker started and left behind when it died is re-parented here, not to init: it can be
        // killed and collected, and its worker holds its place until then.
        _ = keymgr_become_subreaper()
        defer {
            warm.endAll()
            users.end()
        }
        var idleSince = Self.monotonicSeconds()
        while true {
            reap()
            resolveShares()
            admitQueued()
            if stopping {
                listener.close()
                warm.endAll()
                for entry in queued + resolving { close(entry.connection) }  // never served: the client sees the agent gone
                queued = []
                resolving = []
            } else if !warmUp.isEmpty {
                warmUpWhileIdle()
            } else if serving == 0 {
                // Only while no request is being served: preparing a store is a few milliseconds of CPU, which would
                // otherwise compete with the requests. Under a crowd the pool stays empty and connections get cold
                // workers, which cost less in all than a warm worker forked and prepared for each (its placeholders,
                // the store opened ahead and then checked again): warm workers use idle time, never busy time.
                warm.refill()
            }
            if stopping && workers.isEmpty {
                if let failure { throw ExitCode(failure) }
                return
            }
            if !workers.isEmpty { idleSince = Self.monotonicSeconds() }

            // The user database's answers and the keeper's wake the loop like a signal (not watched when there is
            // none: -1).
            var polled = [pollfd(fd: AgentSignals.wakeRead, events: Int16(POLLIN), revents: 0),
                          pollfd(fd: users.channel, events: Int16(POLLIN), revents: 0),
                          pollfd(fd: keeper, events: Int16(POLLIN), revents: 0)]
            let listening = !stopping
            if listening { polled.append(pollfd(fd: listener.descriptor, events: Int16(POLLIN), revents: 0)) }
            let watched = workers.indices.filter { workers[$0].state == .serving }
            // No events asked: poll still reports POLLHUP/POLLERR, which is the client gone (not merely done sending).
            for index in watched { polled.append(pollfd(fd: workers[index].connection, events: 0, revents: 0)) }
            let waiting = polled.count
            for entry in queued { polled.append(pollfd(fd: entry.connection, events: 0, revents: 0)) }
            let lingering = polled.count
            for entry in refused { polled.append(pollfd(fd: entry.connection, events: Int16(POLLIN), revents: 0)) }

            var timeout: Int32 = refused.isEmpty && queued.isEmpty ? -1 : 1000
            if !resolving.isEmpty { timeout = 250 }
            if canWarmUp { timeout = 0 }  // back to the warm-up once the pending connections are served
            if let idleExit, workers.isEmpty, !stopping {
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
            dropQueued(polled[waiting..<lingering].map(\.revents))
            if ready == 0 { continue }  // the idle time is checked at the top
            AgentSignals.drain()
            if keeper >= 0, polled[2].revents != 0 { keeperAnswered() }

            let offset = listening ? 4 : 3
            for (position, index) in watched.enumerated()
            where polled[offset + position].revents & Int16(POLLHUP | POLLERR) != 0 {
                end(index)
            }
            if listening, polled[3].revents & Int16(POLLIN) != 0 { acceptAll() }
        }
    }

    /// Stopping: asked to (SIGTERM, SIGINT), or the keeper found the store cannot be served.
    private var stopping: Bool { AgentSignals.stopping || failure != nil }

    /// Whether warm-up steps are left and may run now: no request is being served or waits.
    private var canWarmUp: Bool { !warmUp.isEmpty && serving == 0 && queued.isEmpty && resolving.isEmpty && !stopping }

    /// Runs warm-up steps while no request is being served or waits, and nothing is pending: a connection that
    /// comes is served first (by a cold worker), and the warm-up goes on once it is done.
    private func warmUpWhileIdle() {
        while canWarmUp, !somethingPending() {
            warmUp.removeFirst()()
        }
    }

    /// Whether a connection, the keeper's answer or a signal waits (without waiting for one).
    private func somethingPending() -> Bool {
        var polled = [pollfd(fd: listener.descriptor, events: Int16(POLLIN), revents: 0),
                      pollfd(fd: keeper, events: Int16(POLLIN), revents: 0),
                      pollfd(fd: AgentSignals.wakeRead, events: Int16(POLLIN), revents: 0)]
        return poll(&polled, nfds_t(polled.count), 0) != 0
    }

    /// The keeper's answer (see `keeper`): the store is good (systemd is told the agent is ready), or it is not
    /// (the agent stops listening and ends 78 once its workers are done; the keeper said why on stderr).
    private func keeperAnswered() {
        var byte: UInt8 = 0
        var got: Int
        repeat { got = read(keeper, &byte, 1) } while got < 0 && errno == EINTR
        if got < 0 && errno == EAGAIN { return }
        close(keeper)
        keeper = -1
        if got == 1 {
            AgentCommand.notifyReady(environment: environment)
        } else {
            failure = FailureCode.config.exitStatus
        }
    }

    /// The workers serving a request now (neither killed nor exited).
    private var serving: Int { workers.count(where: { $0.state == .serving }) }

    /// The client of worker `index` hung up before its answer: nobody waits for its work. The worker is killed with
    /// its process group (a verifier it started, which stays in it, goes too); it holds its place until reaped
    /// and its group is empty.
    private func end(_ index: Int) {
        kill(-workers[index].pid, SIGKILL)
        kill(workers[index].pid, SIGKILL)
        workers[index].state = .killed
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

    /// Reads the caller of `connection` from the kernel and admits it once its share is known.
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
        if let unavailable {
            refuse(connection, status: FailureCode.config.exitStatus, code: FailureCode.config.rawValue, message: unavailable)
            return
        }
        let caller = AgentWorker.KernelCaller(uid: uid, gid: gid, pid: pid, groups: groups)
        let now = Self.monotonicSeconds()
        guard let hasEntry = users.hasEntry(uid, now: now) else {
            // Asked of the user database; served (or queued) when the answer is in.
            if resolving.count >= Self.maxQueued {
                refuse(connection, "the agent already has \(resolving.count) requests waiting: try again in a moment")
                return
            }
            users.ask(uid)
            resolving.append(Queued(connection: connection, caller: caller, share: uid,
                                    until: now + AgentUserDirectory.patience))
            return
        }
        admit(connection, caller: caller, share: hasEntry ? uid : Self.sharedShare)
    }

    /// Admits the connections whose caller's share is now known, or whose answer took too long (their uid is then
    /// its own share).
    private func resolveShares() {
        let now = Self.monotonicSeconds()
        _ = users.readAnswers(now: now)
        guard !resolving.isEmpty else { return }
        var waiting: [Queued] = []
        for entry in resolving {
            if let hasEntry = users.hasEntry(entry.caller.uid, now: now) {
                admit(entry.connection, caller: entry.caller, share: hasEntry ? entry.caller.uid : Self.sharedShare)
            } else if now >= entry.until {
                admit(entry.connection, caller: entry.caller, share: entry.caller.uid)
            } else {
                waiting.append(entry)
            }
        }
        resolving = waiting
    }

    /// Forks a worker for `connection` from `caller`, counted against `share`; queues it when the agent has no
    /// place now; answers busy when its share is full of requests being served.
    private func admit(_ connection: Int32, caller: AgentWorker.KernelCaller, share: UInt32) {
        // A worker that has answered may not have been reaped yet, and one whose client hung up is ending.
        reap()
        endAbandoned()
        let mine = workers.filter { $0.share == share }
        if mine.count(where: { $0.state == .serving }) >= limits.workersPerUser {
            let who = share == Self.sharedShare ? "the uids with no user on this device already have" : "uid \(share) already has"
            refuse(connection, "\(who) \(limits.workersPerUser) requests running: try again in a moment")
            return
        }
        if mine.count < limits.workersPerUser, workers.count < limits.workers, queued.isEmpty {
            start(connection, caller: caller, share: share)
            return
        }
        // Full, or only held by workers that are ending: the place is taken by whoever the queue serves first.
        if queued.count >= Self.maxQueued {
            refuse(connection, "the agent already has \(serving) requests running and \(queued.count) waiting: try again in a moment")
            return
        }
        queued.append(Queued(connection: connection, caller: caller, share: share,
                             until: Self.monotonicSeconds() + Self.queueWait))
        admitQueued()
    }

    /// Starts the queued connections there is a place for: first the share holding the fewest workers (so a person
    /// under their share is served before the one holding the most), then the one that waited longest.
    private func admitQueued() {
        while !queued.isEmpty, workers.count < limits.workers {
            var held: [UInt32: Int] = [:]
            for worker in workers { held[worker.share, default: 0] += 1 }
            let candidates = queued.indices.filter { held[queued[$0].share, default: 0] < limits.workersPerUser }
            guard let next = candidates.min(by: { held[queued[$0].share, default: 0] < held[queued[$1].share, default: 0] })
            else { return }
            let entry = queued.remove(at: next)
            start(entry.connection, caller: entry.caller, share: entry.share)
        }
    }

    /// Hands `connection` to a warm worker, or forks a cold one for it.
    private func start(_ connection: Int32, caller: AgentWorker.KernelCaller, share: UInt32) {
        if let handed = warm.handOver(connection: connection, uid: caller.uid, gid: caller.gid, pid: caller.pid,
                                      groups: caller.groups) {
            workers.append(Worker(pid: handed, connection: connection, share: share))
            yieldCPU()
            return
        }
        let child = fork()
        if child == 0 {
            AgentWorker.serve(connection: connection, uid: caller.uid, gid: caller.gid, pid: caller.pid,
                              groups: caller.groups, home: home, environment: environment, policy: policy)
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
        workers.append(Worker(pid: child, connection: connection, share: share))
        yieldCPU()
    }

    /// Places are shared fairly, and so is the processor: while several shares are served, the workers of a share
    /// holding more of them than the share holding the fewest run at nice `yieldingNice`, so one uid flooding the
    /// agent at its limit does not take the processor from a person's one request. A worker once niced stays so
    /// (it serves one request); with one share served (one person, however many requests) nothing is niced.
    private func yieldCPU() {
        var held: [UInt32: Int] = [:]
        for worker in workers where worker.state == .serving { held[worker.share, default: 0] += 1 }
        guard held.count > 1, let fewest = held.values.min() else { return }
        for index in workers.indices where workers[index].state == .serving && !workers[index].yielding
            && held[workers[index].share, default: 0] > fewest {
            // Its threads too: the worker is one thread when forked, but a command may start more.
            _ = setpriority(__priority_which_t(PRIO_PGRP.rawValue), id_t(workers[index].pid), Self.yieldingNice)
            workers[index].yielding = true
        }
    }

    /// Answers busy with `message` and keeps the connection a while (`dropRefused`).
    private func refuse(_ connection: Int32, _ message: String) {
        refuse(connection, status: FailureCode.busy.exitStatus, code: FailureCode.busy.rawValue, message: message)
    }

    /// Answers `connection` with `status` and an error without a worker, and keeps it a while (see `Refused`).
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

    /// Closes queued connections whose client hung up; answers busy those that waited too long.
    private func dropQueued(_ events: [Int16]) {
        let now = Self.monotonicSeconds()
        var kept: [Queued] = []
        for (entry, revents) in zip(queued, events) {
            if revents & Int16(POLLHUP | POLLERR) != 0 {
                close(entry.connection)
            } else if now >= entry.until {
                refuse(entry.connection, "the agent was busy for \(Int(Self.queueWait)) seconds: try again in a moment")
            } else {
                kept.append(entry)
            }
        }
        queued = kept
    }

    /// The share of every uid without an entry in the user database: (uid_t)-1, which no process can have.
    static let sharedShare = UInt32.max


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

    /// Collects every child that has ended: a worker's connection is closed and what is left of its process group
    /// killed; the worker gives up its place once its group is empty. Anything else re-parented here (a process a
    /// worker started that left the worker's group) is killed.
    private func reap() {
        var orphans = false
        while true {
            var status: Int32 = 0
            let pid = waitpid(-1, &status, WNOHANG)
            guard pid > 0 else { break }
            if let index = workers.firstIndex(where: { $0.pid == pid && $0.state != .exited }) {
                close(workers[index].connection)
                workers[index].connection = -1
                workers[index].state = .exited
                kill(-pid, SIGKILL)  // its request is over: what it started goes too
                orphans = true
            } else if !warm.exited(pid) && !users.exited(pid) {
                orphans = true  // killed while waiting: `refill` forks another; else a process re-parented here
            }
        }
        if orphans { killStrays() }
        workers.removeAll { worker in
            guard worker.state == .exited else { return false }
            return kill(-worker.pid, 0) != 0 && errno == ESRCH
        }
    }

    /// Kills the agent's children that belong to no worker's group, no warm worker's and not the agent's own (the
    /// store's keeper): processes a worker started, moved to a group of their own, and left behind when it died.
    private func killStrays() {
        let me = getpid()
        let known = Set(workers.map(\.pid) + warm.pids + [getpgrp()])
        let text = (try? String(contentsOfFile: "/proc/\(me)/task/\(me)/children", encoding: .utf8)) ?? ""
        for child in text.split(separator: " ").compactMap({ Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) {
            let group = getpgid(child)
            if group >= 0, !known.contains(group) { kill(child, SIGKILL) }
        }
    }

    /// Kills every worker whose client has hung up (as the poll loop does when it sees it).
    private func endAbandoned() {
        let watched = workers.indices.filter { workers[$0].state == .serving }
        guard !watched.isEmpty else { return }
        var polled = watched.map { pollfd(fd: workers[$0].connection, events: 0, revents: 0) }
        guard poll(&polled, nfds_t(polled.count), 0) > 0 else { return }
        for (position, index) in watched.enumerated() where polled[position].revents & Int16(POLLHUP | POLLERR) != 0 {
            end(index)
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
