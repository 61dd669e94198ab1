import CAgentSocket
import Foundation
import KeyManager

/// One connection's process, forked by the agent: reads the request (10 s deadline, size limit), puts the passed
/// descriptors at their numbers, becomes the caller's (`AgentCaller`), refuses what the agent does not serve, asks
/// the policy, runs the command line with the same code as keymgr run directly (`KeymgrMain`), answers
/// `{"status":N}` and exits.
enum AgentWorker {
    /// How long a client has to send its whole request.
    static let requestDeadline: Double = 10

    /// Serves `connection` for the caller the kernel reported, and exits.
    static func serve(connection: Int32, uid: UInt32, gid: UInt32, pid: Int32, groups: [UInt32], home: String?) -> Never {
        _ = setpgid(0, 0)
        AgentSignals.resetInWorker()
        // Nothing of the agent's other connections, and not its listening socket: only this one and stdio.
        closeAll(except: [0, 1, 2, connection])

        let request: AgentRequestFrame
        let passed: [Int32]
        do {
            (request, passed) = try read(connection)
        } catch let failure as Refusal {
            answer(connection, status: failure.status, error: (failure.code, failure.message))
        } catch {
            answer(connection, status: 64, error: ("usage", "the request could not be read"))
        }

        let expected = request.fds.count + (request.terminal ? 1 : 0)
        guard passed.count == expected else {
            for descriptor in passed { close(descriptor) }
            answer(connection, status: 64, error: ("usage",
                "the request passed \(passed.count) descriptors and names \(expected) (fds, and the terminal if any)"))
        }
        let arguments: [String]
        do {
            arguments = try servedArguments(request.arguments)
        } catch let failure as Refusal {
            answer(connection, status: failure.status, error: (failure.code, failure.message))
        } catch {
            answer(connection, status: 64, error: ("usage", "the request could not be read"))
        }

        let (socket, terminal) = place(passed, at: request.fds, terminal: request.terminal, connection: connection)
        let caller = AgentCaller(uid: uid, gid: gid, pid: pid, groups: groups)
        AgentCaller.serve(caller)
        ControllingTerminal.serve(passed: terminal)
        CallerFiles.serve(passed: Set(request.fds))
        ProcessEnvironment.serve(home: home, columns: request.columns)

        let status = KeymgrMain.run(arguments: arguments) { command in
            try AgentGate.authorize(command, caller: caller)
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
        let frame = AgentResponseFrame.encode(status: status, error: error)
        _ = frame.withUnsafeBytes { agent_socket_send(socket, $0.baseAddress, $0.count, nil, 0) }
        _exit(status)
    }

    /// The request and the descriptors that came with it, within the deadline.
    static func read(_ connection: Int32) throws -> (AgentRequestFrame, [Int32]) {
        let deadline = AgentServer.monotonicSeconds() + requestDeadline
        var passed: [Int32] = []
        var header: [UInt8] = []
        do {
            try receive(connection, count: 4, into: &header, passed: &passed, deadline: deadline)
            let length: Int
            do {
                length = try AgentRequestFrame.bodyLength(header: header)
            } catch let malformed as AgentRequestFrame.Malformed {
                throw Refusal.usage(malformed.message)
            }
            var body: [UInt8] = []
            try receive(connection, count: length, into: &body, passed: &passed, deadline: deadline)
            do {
                return (try AgentRequestFrame.decodeBody(body), passed)
            } catch let malformed as AgentRequestFrame.Malformed {
                throw Refusal.usage(malformed.message)
            }
        } catch {
            for descriptor in passed { close(descriptor) }
            throw error
        }
    }

    /// Reads exactly `count` bytes, collecting descriptors, before `deadline`.
    private static func receive(_ connection: Int32, count: Int, into bytes: inout [UInt8], passed: inout [Int32],
                                deadline: Double) throws {
        var buffer = [UInt8](repeating: 0, count: count)
        var have = 0
        while have < count {
            let left = deadline - AgentServer.monotonicSeconds()
            guard left > 0 else {
                throw Refusal(status: 75, code: "timeout",
                              message: "the request did not arrive within \(Int(requestDeadline)) seconds")
            }
            var ready = [pollfd(fd: connection, events: Int16(POLLIN), revents: 0)]
            let polled = poll(&ready, 1, Int32(left * 1000) + 1)
            if polled < 0 && errno != EINTR { throw Refusal.usage("the request could not be read") }
            if polled <= 0 { continue }
            let room = Int(AGENT_SOCKET_MAX_FDS) - passed.count
            var fds = [Int32](repeating: -1, count: Int(AGENT_SOCKET_MAX_FDS))
            var received = 0
            let got = buffer.withUnsafeMutableBytes { raw in
                agent_socket_receive(connection, raw.baseAddress! + have, count - have, &fds, room, &received)
            }
            passed += fds.prefix(received)
            if got < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                if errno == EMSGSIZE {
                    throw Refusal.usage("the request passed more than \(AgentRequestFrame.maxDescriptors) descriptors and a terminal")
                }
                throw Refusal.usage("the request could not be read")
            }
            if got == 0 { throw Refusal.usage("the connection ended in the middle of the request") }
            have += got
        }
        bytes = buffer
    }

    /// The command line to run: `--socket` dropped (the client's business), `--home`, `agent` and `init` refused.
    static func servedArguments(_ arguments: [String]) throws -> [String] {
        var served: [String] = []
        var index = arguments.startIndex
        var command: String?
        while index < arguments.endIndex {
            let token = arguments[index]
            index += 1
            if token == "--" {
                served.append(contentsOf: arguments[(index - 1)...])
                break
            }
            if token == "--home" || token.hasPrefix("--home=") {
                throw Refusal.usage("--home is not served: the agent serves one store (leave out --home, or run keymgr without the agent)")
            }
            if token == "--socket" {
                index += 1  // and its value
                continue
            }
            if token.hasPrefix("--socket=") { continue }
            if command == nil, !token.hasPrefix("-") { command = token }
            served.append(token)
        }
        if let command, command == AgentCommand.configuration.commandName || command == Init.configuration.commandName {
            throw Refusal.usage("`keymgr \(command)` is not served through the agent: run it as the store's owner, without the agent")
        }
        return served
    }

    /// Puts passed descriptor i at number `targets[i]` (the connection moved out of the way first); stdin, stdout or
    /// stderr not passed become /dev/null; every other descriptor is closed. Returns the connection's and the
    /// terminal's new numbers.
    static func place(_ passed: [Int32], at targets: [Int32], terminal: Bool, connection: Int32) -> (Int32, Int32?) {
        let above = (targets + [2]).max()! + 1
        // Every received descriptor and the connection first go above every target, so no dup2 below clobbers one.
        let socket = fcntl(connection, F_DUPFD_CLOEXEC, above)
        close(connection)
        var moved: [Int32] = []
        for descriptor in passed {
            moved.append(fcntl(descriptor, F_DUPFD_CLOEXEC, above))
            close(descriptor)
        }
        for (index, target) in targets.enumerated() {
            _ = dup2(moved[index], target)  // not close-on-exec: a verifier the command starts gets them too
            close(moved[index])
        }
        let tty = terminal ? moved[targets.count] : nil
        let null = open("/dev/null", O_RDWR | O_CLOEXEC)
        for standard: Int32 in 0...2 where !targets.contains(standard) { _ = dup2(null, standard) }
        let keep = targets + [socket] + (tty.map { [$0] } ?? [])
        closeAll(except: keep)
        return (socket, tty)
    }

    /// Closes every open descriptor of the worker but `keep` (listed from /proc/self/fd).
    static func closeAll(except keep: [Int32]) {
        guard let directory = opendir("/proc/self/fd") else { return }
        let own = dirfd(directory)
        var open: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let descriptor = Int32(name), descriptor != own { open.append(descriptor) }
        }
        closedir(directory)
        for descriptor in open where !keep.contains(descriptor) { close(descriptor) }
    }
}
