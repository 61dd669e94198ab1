import AgentWire
import CAgentSocket
import Foundation
import KeyManager

/// One connection's process, forked by the agent: reads the request (10 s deadline, size limit), puts the passed
/// descriptors at their numbers, becomes the caller's (`AgentCaller`), refuses what the agent does not serve, asks
/// the policy, runs the command line with the same code as keymgr run directly (`KeymgrMain`), answers
/// `{"status":N}` and exits.
enum AgentWorker {
    /// How long a client has to send its whole request.
    static let requestDeadline = Double(AgentWire.requestDeadlineSeconds)
    /// How long a client has to send the first byte of its request (the CLI's client sends it as soon as it is
    /// connected): a connection that says nothing gives up its place sooner than one sending slowly.
    static let firstByteDeadline: Double = 2

    /// Serves `connection` for the caller the kernel reported, and exits: the cold worker, forked for this
    /// connection.
    static func serve(connection: Int32, uid: UInt32, gid: UInt32, pid: Int32, groups: [UInt32], home: String?,
                      environment: [String: String], policy: AgentPolicy?) -> Never {
        _ = setpgid(0, 0)
        AgentSignals.resetInWorker()
        AgentProcessName.set("keymgr-worker")
        serveRequest(connection: connection, caller: KernelCaller(uid: uid, gid: gid, pid: pid, groups: groups),
                     home: home, environment: environment, policy: policy, keeping: [])
    }

    /// The caller as the kernel reported it on the connection, read by the agent.
    struct KernelCaller {
        let uid: UInt32
        let gid: UInt32
        let pid: Int32
        let groups: [UInt32]
    }

    /// One request on `connection` for `caller`, the same for a cold worker and a warm one, and exits. `keeping`:
    /// descriptors of the worker's own (a warm worker's prepared store) that stay open, all above
    /// `AgentWire.maximumDescriptorNumber`.
    /// `policy`: the one the agent loaded at start (nil: it allows nothing). `environment`: the agent's.
    static func serveRequest(connection: Int32, caller reported: KernelCaller, home: String?,
                             environment: [String: String], policy: AgentPolicy?, keeping: [Int32]) -> Never {
        // Nothing of the agent's other connections, and not its listening socket: only this one and stdio.
        closeAll(except: [0, 1, 2, connection] + keeping)

        let request: AgentRequest
        let passed: [Int32]
        do {
            (request, passed) = try read(connection)
        } catch let failure as Refusal {
            answer(connection, status: failure.status, error: (failure.code, failure.message))
        } catch {
            answer(connection, status: 64, error: ("usage", "the request could not be read"))
        }

        let expected = request.descriptorCount
        guard passed.count == expected else {
            for descriptor in passed { close(descriptor) }
            answer(connection, status: 64, error: ("usage", "the request passed \(passed.count) descriptors and names "
                + "\(expected) (fds, the terminal if any, and the named files)"))
        }
        let arguments: [String]
        do {
            arguments = try servedArguments(request.arguments)
        } catch let failure as Refusal {
            answer(connection, status: failure.status, error: (failure.code, failure.message))
        } catch {
            answer(connection, status: 64, error: ("usage", "the request could not be read"))
        }

        guard let placed = place(passed, at: request.fds, terminal: request.terminal, connection: connection,
                                 keeping: keeping) else {
            answer(connection, status: 75, error: ("busy", "the agent could not take the request's descriptors: try again in a moment"))
        }
        let (socket, terminal, named) = placed
        // Only now, with every descriptor in place: the user database look-up for the login name may keep a file
        // or socket open (nss modules do), which must not be closed under it.
        // The request's context, built once here: the kernel's caller, the agent's policy, the client's terminal and
        // descriptors (now at 0, 1, 2), the agent's environment with the request's over it. `KeymgrMain` asks the
        // gate for the policy's decision and hands the decided context to the command, which passes its request to
        // `KeyManager.open`.
        let caller = AgentCaller(uid: reported.uid, gid: reported.gid, pid: reported.pid, groups: reported.groups)
        let files = zip(request.files, named).map { PassedFile(argument: $0, descriptor: $1) }
        let served = RequestContext(caller: caller, policy: policy, terminal: terminal ?? -1, columns: request.columns,
                                    home: home, passedDescriptors: request.fds, files: files)
        let context = CommandContext.serving(served, agentEnvironment: environment)
        // The same in the worker's own environment, for what a child of it reads there (a verifier command).
        if let home = served.home { setenv("KEYMGR_HOME", home, 1) }
        if let columns = served.columns { setenv("COLUMNS", String(columns), 1) } else { unsetenv("COLUMNS") }

        // The answer goes out once the command is done, not after the store's teardown: the worker exits next.
        KeyManager.keepStoresOpenUntilExit()
        let status = KeymgrMain.run(arguments: arguments, context: context) { command, request in
            try AgentGate.authorize(command, request: request, environment: context.environment)
        }
        answer(socket, status: status, error: nil)
    }

    /// A request the worker answers with an error instead of running it.
    struct Refusal: Error {
        let status: Int32
        let code: String
        let message: String

        static func usage(_ message: String) -> Refusal { Refusal(status: 64, code: "usage", message: message) }
    }

    /// Sends the response and exits with `status` (the worker never returns to the agent's loop).
    static func answer(_ socket: Int32, status: Int32, error: (code: String, message: String)?) -> Never {
        fflush(nil)  // anything a library left in a stdio buffer goes out before the answer
        let frame = Self.frame(status: status, error: error)
        _ = frame.withUnsafeBytes { agent_socket_send(socket, $0.baseAddress, $0.count, nil, 0) }
        _exit(status)
    }

    /// A framed answer.
    static func frame(status: Int32, error: (code: String, message: String)?) -> [UInt8] {
        AgentWire.frame(AgentResponse(status: status, error: error.map { .init(code: $0.code, message: $0.message) }).encoded())
    }

    /// The request and the descriptors that came with it, within the deadline.
    static func read(_ connection: Int32) throws -> (AgentRequest, [Int32]) {
        let started = AgentServer.monotonicSeconds()
        let deadline = started + requestDeadline
        var passed: [Int32] = []
        var header: [UInt8] = []
        do {
            try receive(connection, count: 4, into: &header, passed: &passed, deadline: deadline,
                        firstByteBy: started + firstByteDeadline)
            let length: Int
            do {
                length = try AgentWire.bodyLength(header: header)
            } catch {
                throw Refusal.usage(error.message)
            }
            var body: [UInt8] = []
            try receive(connection, count: length, into: &body, passed: &passed, deadline: deadline)
            do {
                return (try AgentRequest.decode(body), passed)
            } catch {
                throw Refusal.usage(error.message)
            }
        } catch {
            for descriptor in passed { close(descriptor) }
            throw error
        }
    }

    /// Reads exactly `count` bytes, collecting descriptors, before `deadline` (and the first of them before
    /// `firstByteBy`, when given).
    private static func receive(_ connection: Int32, count: Int, into bytes: inout [UInt8], passed: inout [Int32],
                                deadline: Double, firstByteBy: Double? = nil) throws {
        var buffer = [UInt8](repeating: 0, count: count)
        var have = 0
        while have < count {
            let now = AgentServer.monotonicSeconds()
            if have == 0, let firstByteBy, now >= firstByteBy {
                throw Refusal.usage("the request did not start within \(Int(firstByteDeadline)) seconds")
            }
            let left = min(deadline, have == 0 ? firstByteBy ?? deadline : deadline) - now
            guard left > 0 else {
                throw Refusal.usage("the request did not arrive within \(AgentWire.requestDeadlineSeconds) seconds")
            }
            var ready = [pollfd(fd: connection, events: Int16(POLLIN), revents: 0)]
            let polled = poll(&ready, 1, Int32(left * 1000) + 1)
            if polled < 0 && errno != EINTR { throw Refusal.usage("the request could not be read") }
            if polled <= 0 { continue }
            let room = Int(AGENT_SOCKET_MAX_FDS) - passed.count
            var fds = [Int32](repeating: -1, count: Int(AGENT_SOCKET_MAX_FDS))
            var received = 0
            let got = buffer.withUnsafeMutableBytes { raw -> Int in
                guard let start = raw.baseAddress else { return -1 }
                return agent_socket_receive(connection, start + have, count - have, &fds, room, &received)
            }
            passed += fds.prefix(received)
            if got < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                if errno == EMSGSIZE {
                    throw Refusal.usage("the request passed more than \(AgentWire.maximumDescriptors) descriptors, a "
                        + "terminal and \(AgentWire.maximumNamedFiles) named files")
                }
                throw Refusal.usage("the request could not be read")
            }
            if got == 0 { throw Refusal.usage("the connection ended in the middle of the request") }
            have += got
        }
        bytes = buffer
    }

    /// The command line to run: `--socket` and its value dropped (the client's business), `--home`, `agent` and
    /// `init` refused. Read with `ArgumentScan`, as the client read it: what follows `--` is left as it is.
    static func servedArguments(_ arguments: [String]) throws -> [String] {
        let scan = ArgumentScan(arguments)
        var served: [String] = []
        for element in scan.elements {
            switch element {
            case .option("--home", _, _):
                throw Refusal.usage("--home is not served: the agent serves one store (leave out --home, or run keymgr without the agent)")
            case .option("--socket", _, _):
                continue
            case .option(let name, let value, let inline):
                served.append(inline ? name + "=" + (value ?? "") : name)
                if !inline, let value { served.append(value) }
            case .word(let word):
                served.append(word)
            }
        }
        if scan.hasTerminator { served += ["--"] + scan.operands }
        if let command = scan.subcommand,
           command == AgentCommand.configuration.commandName || command == Init.configuration.commandName {
            throw Refusal.usage("`keymgr \(command)` is not served through the agent: run it as the store's owner, without the agent")
        }
        return served
    }

    /// Puts passed descriptor i at number `targets[i]` (the connection moved out of the way first); stdin, stdout or
    /// stderr not passed become /dev/null; every other descriptor is closed. What follows the targets' descriptors
    /// (the terminal when `terminal`, then the named files) stays above every target. Returns the connection's, the
    /// terminal's and the named files' new numbers, or nil (the connection where it was) when the descriptors could
    /// not be moved.
    static func place(_ passed: [Int32], at targets: [Int32], terminal: Bool, connection: Int32,
                      keeping: [Int32] = []) -> (socket: Int32, terminal: Int32?, files: [Int32])? {
        let above = max(targets.max() ?? 2, 2) + 1
        // Every received descriptor and the connection first go above every target, so no dup2 below clobbers one.
        let socket = fcntl(connection, F_DUPFD_CLOEXEC, above)
        guard socket >= 0 else { return nil }
        close(connection)
        var moved: [Int32] = []
        for descriptor in passed {
            moved.append(fcntl(descriptor, F_DUPFD_CLOEXEC, above))
            close(descriptor)
        }
        guard !moved.contains(where: { $0 < 0 }) else {
            _ = dup2(socket, connection)
            return nil
        }
        for (index, target) in targets.enumerated() {
            _ = dup2(moved[index], target)  // the command's own (a verifier command gets none: keymgr_spawn)
            close(moved[index])
        }
        let tty: Int32? = terminal ? moved[targets.count] : nil
        let files = Array(moved.dropFirst(targets.count + (terminal ? 1 : 0)))
        let null = open("/dev/null", O_RDWR | O_CLOEXEC)
        for standard: Int32 in 0...2 where !targets.contains(standard) { _ = dup2(null, standard) }
        // Appended, not `+`: TOMLKit (linked through KeyManager) declares a generic `+` the type checker then weighs.
        var keep = targets
        keep.append(socket)
        if let tty { keep.append(tty) }
        keep.append(contentsOf: files)
        keep.append(contentsOf: keeping)
        closeAll(except: keep)
        return (socket, tty, files)
    }

    /// Closes every open descriptor of the worker but `keep`: one close_range(2) per gap between the kept numbers,
    /// so the cost does not grow with how many are open (a warm worker holds some 260).
    static func closeAll(except keep: [Int32]) {
        var first: UInt32 = 0
        for kept in Set(keep.filter { $0 >= 0 }).sorted() {
            if UInt32(kept) > first { _ = agent_close_range(first, UInt32(kept) - 1) }
            first = UInt32(kept) + 1
        }
        _ = agent_close_range(first, UInt32.max)
    }

    /// The descriptors open in this process.
    static func openDescriptors() -> [Int32] {
        guard let directory = opendir("/proc/self/fd") else { return [] }
        let own = dirfd(directory)
        var open: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let descriptor = Int32(name), descriptor != own { open.append(descriptor) }
        }
        closedir(directory)
        return open
    }
}
