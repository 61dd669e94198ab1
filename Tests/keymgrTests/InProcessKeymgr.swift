import ArgumentParser
import Foundation
import KeyManager
import XCTest
@testable import keymgr

/// keymgr's command line run in the test process, through the entry point the binary and the agent's worker use
/// (`KeymgrMain.run`), with a context of its own: stdin from a file holding the given text, stdout and stderr to
/// files the test reads, no terminal, the sandbox's environment. Nothing of one run is kept for the next: each
/// builds a fresh `CommandContext`, and `KeymgrMain` keeps none.
extension Sandbox {
    /// Runs `keymgr --home <home> <arguments>` in this process, as `keymgr(_:)` runs the binary, for `request`
    /// (`.embedded`: keymgr run directly), asking `authorize` (the agent's gate) before the command runs.
    @discardableResult
    func keymgrInProcess(_ arguments: [String], stdin: String = "", home: URL? = nil,
                         extraEnvironment: [String: String] = [:], request: RequestContext = .embedded,
                         authorize: ((any ParsableCommand, RequestContext) throws -> RequestContext)? = nil) throws -> Outcome {
        try runInProcess(["--home", (home ?? self.home).path] + arguments, stdin: stdin,
                         extraEnvironment: extraEnvironment, request: request, authorize: authorize)
    }

    /// Runs exactly `arguments` in this process (no `--home` added). A served `request` gets the environment the
    /// agent's worker builds for it (`CommandContext.serving`: its `home` as `KEYMGR_HOME`).
    func runInProcess(_ arguments: [String], stdin: String = "", extraEnvironment: [String: String] = [:],
                      request: RequestContext = .embedded,
                      authorize: ((any ParsableCommand, RequestContext) throws -> RequestContext)? = nil) throws -> Outcome {
        let run = root.appendingPathComponent("in-process-\(UUID().uuidString)")
        let files = ["in", "out", "err"].map { run.appendingPathExtension($0) }
        _ = FileManager.default.createFile(atPath: files[0].path, contents: Data(stdin.utf8))
        defer { for file in files { try? FileManager.default.removeItem(at: file) } }
        let input = open(files[0].path, O_RDONLY | O_CLOEXEC)
        let output = open(files[1].path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        let error = open(files[2].path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        defer { for descriptor in [input, output, error] where descriptor >= 0 { close(descriptor) } }
        guard input >= 0, output >= 0, error >= 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: run.path])
        }
        let environment = environment.merging(extraEnvironment) { _, extra in extra }
        var context = request.isServed ? CommandContext.serving(request, agentEnvironment: environment)
                                       : CommandContext.direct(environment: environment)
        context.streams = StandardStreams(input: input, output: output, error: error)
        context.terminal = .none
        let status = KeymgrMain.run(arguments: arguments, context: context, authorize: authorize)
        return Outcome(status: status,
                       stdout: String(decoding: try Data(contentsOf: files[1]), as: UTF8.self),
                       stderr: String(decoding: try Data(contentsOf: files[2]), as: UTF8.self),
                       arguments: arguments)
    }
}
