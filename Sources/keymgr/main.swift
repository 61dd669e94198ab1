import AgentWire
import KeyManager
import Foundation

// keymgr's process entry point: harden the process, check the raw argv, run the command line (KeymgrMain), exit
// with its status. The agent's workers call KeymgrMain.run the same way, with the request's arguments.

// Before anything reads a master key, PIN or private key: no core file, no ptrace by other processes.
ProcessHardening.disableCoreDumps()
OpenSSLLibrary.initializeWithoutCleanupAtExit()

let arguments = Array(CommandLine.arguments.dropFirst())

// CommandLine.arguments has already replaced invalid UTF-8 with U+FFFD, which could then match another user's
// id: the raw argv decides.
if let bad = RawArguments.firstInvalidUTF8() {
    let scan = ArgumentScan(arguments)
    exit(FailureReport.running(CommandFailure(.badInput, "argument \(bad) is not valid UTF-8 text: "
        + "give user ids and other values as UTF-8"), json: scan.has("--json"), verbose: scan.has("--verbose"), on: .standard))
}

// The one command line this process runs, as the OS user running it: descriptors 0, 1, 2, /dev/tty and the process's
// environment, read once here.
exit(KeymgrMain.run(arguments: arguments, context: .direct(environment: ProcessInfo.processInfo.environment)))
