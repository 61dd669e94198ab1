import AgentWire
import CAgentSocket
import Glibc

/// One command through the agent: connect, send the request and the descriptors, wait for the answer, and return
/// the status to exit with.
struct AgentSession {
    let socketPath: String
    /// True when the socket was asked for (`--socket`, `KEYMGR_SOCKET`); false for the default socket found on disk.
    let explicit: Bool
    let arguments: ClientArguments

    func run() -> Int32 {
        if let bad = RawArgumentCheck.firstInvalidUTF8() {
            return fail("badInput", 65, "argument \(bad) is not valid UTF-8 text: give user ids and other values as UTF-8")
        }
        // The descriptors first: a closed stdin, stdout or stderr is passed as /dev/null, as the agent requires all three.
        var numbers: [Int32] = [0, 1, 2]
        var passed: [Int32] = []
        for standard: Int32 in 0...2 {
            if fcntl(standard, F_GETFD) >= 0 {
                passed.append(standard)
            } else {
                let null = open("/dev/null", O_RDWR | O_CLOEXEC)
                guard null >= 0 else { return fail("failure", 1, "cannot open /dev/null for a closed descriptor \(standard)") }
                passed.append(null)
            }
        }
        for named in arguments.namedDescriptors where !numbers.contains(named) {
            guard named <= AgentWire.maximumDescriptorNumber else {
                return fail("usage", 64, "descriptor \(named) cannot be passed to the agent: use a descriptor from 3 to "
                    + "\(AgentWire.maximumDescriptorNumber) for --pin-fd and --password-fd")
            }
            // One that is not open is not passed: the command then fails on it as it would in embedded mode.
            guard fcntl(named, F_GETFD) >= 0 else { continue }
            guard numbers.count < AgentWire.maximumDescriptors else {
                return fail("usage", 64, "too many descriptors for the agent: at most \(AgentWire.maximumDescriptors)")
            }
            numbers.append(named)
            passed.append(named)
        }
        var columns: Int?
        if let text = ClientEnvironment.value("COLUMNS"), let value = Int(text), value > 0, value <= AgentWire.maximumColumns {
            columns = value
        }
        // Files the options name, opened here with the caller's own rights (the agent reads or writes them through
        // these descriptors and never opens the names itself): a file the caller may not use is refused here.
        var files: [(file: NamedFileArgument, descriptor: Int32)] = []
        defer {
            for opened in files {
                ClientFiles.discardIfUnused(opened.file, descriptor: opened.descriptor)
                close(opened.descriptor)
            }
        }
        for file in arguments.namedFiles {
            switch ClientFiles.open(file) {
            case .success(let descriptor): files.append((file, descriptor))
            case .failure(let failure): return fail(failure.code, failure.status, failure.message)
            }
        }
        let terminal = ClientTerminal.open()
        if let terminal { passed.append(terminal) }
        passed += files.map { $0.descriptor }
        let request = AgentRequest(arguments: arguments.all, fds: numbers, terminal: terminal != nil, columns: columns,
                                   files: files.map { $0.file })
        let body = request.encoded()
        guard body.count <= AgentWire.maximumFrameLength else {
            return fail("usage", 64, "the command line is too long for the agent: its request is \(body.count) bytes, "
                + "at most \(AgentWire.maximumFrameLength)")
        }

        let connection = agent_socket_connect(socketPath)
        guard connection >= 0 else { return connectFailure(errno) }
        defer { close(connection) }

        let frame = AgentWire.frame(body)
        let sent = frame.withUnsafeBytes { bytes in
            passed.withUnsafeBufferPointer { fds in
                agent_socket_send(connection, bytes.baseAddress, bytes.count, fds.baseAddress, fds.count)
            }
        }
        guard sent == 0 else {
            let error = errno
            // A busy agent may answer and stop reading before the request is all sent: its answer still says why.
            if case .answer(let response) = readResponse(connection) {
                ClientTerminal.restore()
                if let failure = response.error {
                    ClientFailure.report(code: failure.code, message: failure.message, json: arguments.json)
                }
                return response.status
            }
            return fail("serverUnavailable", 69, "could not send the command to the keymgr agent at \(socketPath): "
                + describe(error))
        }
        // The agent holds its own copies now; the client keeps only the terminal, to restore it.
        for (index, fd) in passed.enumerated() where index < 3 && fd > 2 { close(fd) }

        let outcome = readResponse(connection)
        ClientTerminal.restore()
        switch outcome {
        case .answer(let response):
            if let error = response.error {
                ClientFailure.report(code: error.code, message: error.message, json: arguments.json)
            }
            return response.status
        case .failure(let status, let code, let message):
            return fail(code, status, message)
        }
    }

    private enum Outcome {
        case answer(AgentResponse)
        case failure(Int32, String, String)
    }

    private func readResponse(_ connection: Int32) -> Outcome {
        var header: [UInt8] = []
        guard readExactly(connection, 4, into: &header) else { return hungUp() }
        let length: Int
        do {
            length = try AgentWire.bodyLength(header: header)
        } catch {
            return .failure(69, "serverUnavailable", "the keymgr agent at \(socketPath) answered a malformed frame: \(error.message)")
        }
        var body: [UInt8] = []
        guard readExactly(connection, length, into: &body) else { return hungUp() }
        do {
            return .answer(try AgentResponse.decode(body))
        } catch {
            return .failure(69, "serverUnavailable", "the keymgr agent at \(socketPath) answered a malformed response: \(error.message)")
        }
    }

    private func hungUp() -> Outcome {
        .failure(69, "serverUnavailable", "the keymgr agent at \(socketPath) closed the connection without an answer "
            + "(it may have stopped): the command may or may not have run; check with `keymgr audit -n 5`, and see "
            + "the agent's log (journalctl -u keymgr.service)")
    }

    /// Reads exactly `count` bytes (no descriptors are accepted from the agent); false on EOF or an error.
    private func readExactly(_ fd: Int32, _ count: Int, into bytes: inout [UInt8]) -> Bool {
        bytes = [UInt8](repeating: 0, count: count)
        var offset = 0
        var ignored = 0
        while offset < count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                agent_socket_receive(fd, buffer.baseAddress! + offset, count - offset, nil, 0, &ignored)
            }
            if got <= 0 { return false }
            offset += got
        }
        return true
    }

    private func connectFailure(_ error: Int32) -> Int32 {
        switch error {
        case ENOENT, ECONNREFUSED:
            let how = explicit
                ? "start it (as the store's owner: `systemctl start keymgr.socket`, or `keymgr agent --socket \(socketPath)`), "
                    + "or leave out --socket and KEYMGR_SOCKET and give --home to open a store directly"
                : "ask the device's administrator to start it (`systemctl start keymgr.socket`)"
            return fail("serverUnavailable", 69, "the keymgr agent at \(socketPath) is not running: \(how)")
        case EACCES, EPERM:
            return fail("serverUnavailable", 69, "may not connect to the keymgr agent at \(socketPath): permission denied "
                + "(the socket's directory or mode keeps this user out; ask the device's administrator)")
        case ENAMETOOLONG:
            return fail("usage", 64, "the socket path \(socketPath) is too long for a Unix socket (at most 107 bytes)")
        default:
            return fail("serverUnavailable", 69, "cannot connect to the keymgr agent at \(socketPath): \(describe(error))")
        }
    }

    private func fail(_ code: String, _ status: Int32, _ message: String) -> Int32 {
        ClientFailure.report(code: code, message: message, json: arguments.json)
        return status
    }

    private func describe(_ error: Int32) -> String { String(cString: strerror(error)) }
}

/// The process's argv as the kernel passed it: Swift's `CommandLine.arguments` has already replaced invalid UTF-8,
/// which could then name another user.
enum RawArgumentCheck {
    /// The position (1-based, after the program name) of the first argument that is not valid UTF-8, if any.
    static func firstInvalidUTF8() -> Int? {
        for index in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[index] else { continue }
            let bytes = UnsafeRawBufferPointer(start: raw, count: strlen(raw))
            if !UTF8Check.isValid(bytes) { return index }
        }
        return nil
    }
}
