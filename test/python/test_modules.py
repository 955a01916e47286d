"""The companion's module hooks (python/gpu_workbench/_modules.py) on real models with Debian's torch 1.13:
shape errors named by module and definition line, the first step's summary, and its memory with the
16-bit estimates. Run with the suite: /usr/bin/python3 -m unittest discover -s test/python -v
"""
import json
import unittest

import sys

from test_companion import COMPANION, TORCH, ChannelCase

CNN = """\
    import sys
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self, fc_in):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 8, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
            )
            self.fc = nn.Linear(fc_in, 10)

        def forward(self, x):
            x = self.features(x)
            x = torch.flatten(x, 1)
            return self.fc(x)


    torch.manual_seed(0)
    model = Net(int(sys.argv[1]))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(4, int(sys.argv[2]), 28, 28)
    for step in range(2):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    print("trained")
    """

MLP = """\
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    for step in range(2):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    """

LSTM = """\
    import torch
    from torch import nn


    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(6, 10)
            self.lstm = nn.LSTM(10, 20, batch_first=True)
            self.head = nn.Linear(20, 3)

        def forward(self, x):
            out, _ = self.lstm(torch.relu(self.embed(x)))
            return self.head(out[:, -1])


    torch.manual_seed(0)
    model = Tagger()
    opt = torch.optim.Adam(model.parameters())
    opt.zero_grad()
    model(torch.randn(5, 7, 6)).sum().backward()
    opt.step()
    model.lstm(torch.randn(5, 7, 12))
    """

VIEW = """\
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 5)
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(4 * 5 * 5, 10)

        def forward(self, x):
            x = self.pool(self.conv(x))
            x = x.view(-1, 4 * 5 * 5)
            return self.fc(x)


    model = Net()
    model(torch.randn(2, 1, 28, 28))
    """


def user_lines(stderr):
    """The traceback without the frames of torch (and the lines below them)."""
    out, skip = [], False
    for line in stderr.decode().splitlines():
        if line.startswith("  File "):
            skip = "/torch/" in line
        elif not line.startswith("    "):
            skip = False
        if not skip:
            out.append(line)
    return out


@unittest.skipIf(TORCH, TORCH)
class ModuleCase(ChannelCase):
    def run_script(self, name, text, *args, compare=True):
        path = self.script(name, text)
        ours = self.wrapped([path] + list(args), self.env(self.server))
        if not compare:  # the script looks at the companion itself
            return path, ours, self.server.messages()
        alone = self.run_py([path] + list(args), self.env())
        # The same exit, output and error; a traceback's lines inside torch's Module._call_impl differ
        # (with hooks it takes its other path), the user's own frames do not.
        self.assertEqual((ours.returncode, ours.stdout, user_lines(ours.stderr)), (alone.returncode, alone.stdout, user_lines(alone.stderr)), "the script runs as it does alone")
        return path, ours, self.server.messages()

    def one(self, messages, kind):
        found = [m for m in messages if m["type"] == kind]
        self.assertEqual(len(found), 1, [m["type"] for m in messages])
        return found[0]

    @staticmethod
    def line_of(path, text):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if text in line:
                    return n
        raise AssertionError("%r not in %s" % (text, path))


class ShapeErrors(ModuleCase):
    def test_a_linear_layer_with_the_wrong_in_features_is_named_at_its_definition_line(self):
        path, ours, messages = self.run_script("cnn.py", CNN, "512", "1")
        self.assertIn(b"mat1 and mat2 shapes cannot be multiplied (4x1568 and 512x10)", ours.stderr)
        e = self.one(messages, "moduleError")
        self.assertEqual((e["module"], e["className"], e["model"]), ("fc", "Linear", "Net"))
        self.assertEqual(e["repr"], "Linear(in_features=512, out_features=10, bias=True)")
        self.assertEqual(e["definedAt"], {"file": path, "line": self.line_of(path, "self.fc = nn.Linear(fc_in, 10)")})
        self.assertEqual(e["raisedAt"], {"file": path, "line": self.line_of(path, "return self.fc(x)")})
        self.assertIn("512", e["expected"])
        self.assertIn("1568", e["got"])
        self.assertEqual(e["previous"], {"module": "features", "className": "Sequential", "outputShape": [4, 8, 14, 14],
                                         "definedAt": {"file": path, "line": self.line_of(path, "self.features = nn.Sequential(")}})
        self.assertEqual(e["exception"], {"type": "RuntimeError", "message": "mat1 and mat2 shapes cannot be multiplied (4x1568 and 512x10)"})

    def test_a_conv_layer_given_the_wrong_channels_is_named_at_its_line_inside_the_sequential(self):
        path, ours, messages = self.run_script("cnn.py", CNN, "1568", "3")
        e = self.one(messages, "moduleError")
        self.assertEqual((e["module"], e["className"]), ("features.0", "Conv2d"))
        self.assertEqual(e["definedAt"]["line"], self.line_of(path, "nn.Conv2d(1, 8, 3, padding=1),"))
        self.assertIn("1 channels", e["expected"])
        self.assertIn("3 channels", e["got"])
        self.assertNotIn("previous", e, "the first module of the forward has no previous one")

    def test_a_view_in_the_models_forward_names_the_model_and_the_shape_before_it(self):
        path, ours, messages = self.run_script("view.py", VIEW)
        e = self.one(messages, "moduleError")
        self.assertEqual((e["module"], e["className"]), ("", "Net"))
        self.assertEqual(e["definedAt"]["line"], self.line_of(path, "model = Net()"))
        self.assertEqual(e["raisedAt"]["line"], self.line_of(path, "x = x.view(-1, 4 * 5 * 5)"))
        self.assertIn("[-1, 100]", e["expected"])
        self.assertIn("1152", e["got"])
        self.assertEqual(e["previous"], {"module": "pool", "className": "MaxPool2d", "outputShape": [2, 4, 12, 12],
                                         "definedAt": {"file": path, "line": self.line_of(path, "self.pool = nn.MaxPool2d(2)")}})

    def test_an_lstm_given_the_wrong_input_size_after_the_first_step(self):
        path, ours, messages = self.run_script("lstm.py", LSTM)
        e = self.one(messages, "moduleError")
        self.assertEqual((e["module"], e["className"]), ("lstm", "LSTM"))
        self.assertEqual(e["definedAt"]["line"], self.line_of(path, "self.lstm = nn.LSTM(10, 20, batch_first=True)"))
        self.assertEqual(e["raisedAt"]["line"], self.line_of(path, "model.lstm(torch.randn(5, 7, 12))"))
        self.assertEqual((e["expected"], e["got"]), ("input_size 10 (the input's last dimension)", "inputs whose last dimension is 12"))

    def test_an_error_that_is_no_shape_error_sends_nothing(self):
        _, ours, messages = self.run_script("other.py", "import torch\nraise ValueError('not a shape')\n")
        self.assertEqual([m["type"] for m in messages], ["hello", "hooks"])


class Summary(ModuleCase):
    def test_an_mlps_summary_has_its_rows_and_hand_counted_parameters(self):
        _, ours, messages = self.run_script("mlp.py", MLP)
        s = self.one(messages, "modelSummary")
        self.assertEqual([(r["name"], r["className"], r["depth"], r["outputShape"], r["params"]) for r in s["rows"]], [
            ("", "Sequential", 0, [16, 4], 0),
            ("0", "Linear", 1, [16, 64], 32 * 64 + 64),
            ("1", "ReLU", 1, [16, 64], 0),
            ("2", "Linear", 1, [16, 4], 64 * 4 + 4),
        ])
        self.assertEqual((s["totalParams"], s["trainableParams"]), (2372, 2372))

    def test_a_cnns_summary_counts_its_nested_layers(self):
        _, ours, messages = self.run_script("cnn.py", CNN, "1568", "1")
        self.assertIn(b"trained", ours.stdout)
        s = self.one(messages, "modelSummary")
        rows = {r["name"]: r for r in s["rows"]}
        self.assertEqual(list(rows), ["", "features", "features.0", "features.1", "features.2", "fc"])
        self.assertEqual((rows["features.0"]["params"], rows["features.0"]["depth"], rows["features.0"]["outputShape"]), (8 * 1 * 3 * 3 + 8, 2, [4, 8, 28, 28]))
        self.assertEqual((rows["fc"]["params"], rows["fc"]["outputShape"]), (1568 * 10 + 10, [4, 10]))
        self.assertEqual(s["totalParams"], 80 + 15690)

    def test_an_lstms_summary(self):
        _, ours, messages = self.run_script("lstm.py", LSTM)
        s = self.one(messages, "modelSummary")
        rows = {r["name"]: r for r in s["rows"]}
        self.assertEqual((rows["lstm"]["params"], rows["lstm"]["outputShape"]), (4 * 20 * (10 + 20) + 2 * 4 * 20, [5, 7, 20]))
        self.assertEqual(s["totalParams"], 6 * 10 + 10 + 2560 + 20 * 3 + 3)


    def test_without_an_optimizer_step_the_rows_stop_at_their_limit_and_the_hooks_go_light(self):
        _, ours, messages = self.run_script("infer.py", """\
            import torch
            from torch import nn
            from gpu_workbench import _modules
            _modules.MAX_ROWS = 10
            model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
            for _ in range(100):
                model(torch.zeros(1, 4))
            print(len(_modules._s.rows), _modules._s.depth, [h.__name__ for h in (_modules._pre_light, _modules._post_light)] == [
                next(iter(d.values())).__name__ for d in (torch.nn.modules.module._global_forward_pre_hooks, torch.nn.modules.module._global_forward_hooks)])
            """, compare=False)
        self.assertEqual(ours.stdout, b"10 0 True\n")
        self.assertEqual([m["type"] for m in messages], ["hello", "hooks"])


    def test_while_torch_compile_traces_the_model_the_hooks_record_nothing(self):
        # TorchDynamo inlines the global hooks into the graph it traces; torch.compiler.is_compiling() is
        # True there. torch 2.11's torch.compile failed on the hooks' stores (recorded on an H100); Debian's
        # torch 1.13 has no torch.compile, so the check is swapped in as tracing would make it answer.
        _, ours, messages = self.run_script("traced.py", """\
            import torch
            from torch import nn
            from gpu_workbench import _modules
            model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            _modules._is_compiling = lambda: True
            model(torch.zeros(1, 4))
            print(len(_modules._s.rows), len(_modules._s.row_stack), _modules._s.depth, _modules._s.last)
            _modules._is_compiling = lambda: False
            model(torch.zeros(1, 4)).sum().backward()
            opt.step()
            """, compare=False)
        self.assertEqual(ours.stdout, b"0 0 0 None\n")
        s = self.one(messages, "modelSummary")
        self.assertEqual([r["name"] for r in s["rows"]], ["", "0", "1"])

    def test_a_compiled_models_summary_says_its_activations_were_not_measured(self):
        # What torch.compile looks like to the hooks (recorded on an H100 with torch 2.11: compile.jsonl): one
        # OptimizedModule whose inner modules run while Dynamo traces, i.e. with the hooks silent.
        _, ours, messages = self.run_script("compiled.py", """\
            import torch
            from torch import nn
            from gpu_workbench import _modules

            class OptimizedModule(nn.Module):
                def __init__(self, mod):
                    super().__init__()
                    self._orig_mod = mod

                def forward(self, x):
                    _modules._is_compiling = lambda: True
                    try:
                        return self._orig_mod(x)
                    finally:
                        _modules._is_compiling = lambda: False

            model = OptimizedModule(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
            opt = torch.optim.Adam(model.parameters(), lr=0.1)
            model(torch.zeros(3, 4)).sum().backward()
            opt.step()
            """, compare=False)
        s = self.one(messages, "modelSummary")
        self.assertEqual([r["className"] for r in s["rows"]], ["OptimizedModule"])
        a = s["memory"]["activations"]
        self.assertEqual((a["bytes"], a["measured"]), (0, False))
        self.assertIn("torch.compile graph", a["note"])
        self.assertEqual(s["memory"]["params"]["bytes"], (4 * 8 + 8 + 8 * 2 + 2) * 4)

    def test_the_compiling_check_is_torchs_own_where_torch_has_one(self):
        import types

        sys.path.insert(0, COMPANION)
        from gpu_workbench import _modules

        def is_compiling():
            return True

        self.assertIs(_modules._compiling_check(types.SimpleNamespace(compiler=types.SimpleNamespace(is_compiling=is_compiling))), is_compiling)
        self.assertIs(_modules._compiling_check(types.SimpleNamespace()), _modules._not_compiling)  # torch 1.x

    def test_a_summary_too_long_for_one_channel_line_keeps_the_rows_that_fit_and_counts_the_rest(self):
        _, ours, messages = self.run_script("deep.py", """\
            import torch
            from torch import nn
            model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(3000)])
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.zeros(1, 2)).sum().backward()
            opt.step()
            """)
        s = self.one(messages, "modelSummary")
        self.assertGreater(len(s["rows"]), 100)
        self.assertEqual(len(s["rows"]) + s["rowsOmitted"], 3001)
        self.assertEqual(s["totalParams"], 3000 * 6)
        self.assertLess(len(json.dumps(s, separators=(",", ":"))), 64 * 1024)  # as the channel writes it


class Memory(ModuleCase):
    def test_the_first_steps_memory_is_measured_and_the_16_bit_numbers_estimated_from_it(self):
        _, ours, messages = self.run_script("mlp.py", MLP)
        m = self.one(messages, "modelSummary")["memory"]
        params = 2372 * 4
        self.assertEqual(m["params"], {"bytes": params, "halfBytes": params // 2, "measured": True})
        self.assertEqual(m["grads"], {"bytes": params, "halfBytes": params // 2, "measured": True})
        # Adam: exp_avg and exp_avg_sq per parameter, and a 0-d float32 step per parameter tensor (4 tensors).
        self.assertEqual(m["optimizerState"], {"bytes": 2 * params + 4 * 4, "halfBytes": params + 4 * 4, "measured": True})
        # The leaf modules' outputs: Linear 16x64, ReLU 16x64, Linear 16x4 (the loss module is not the model).
        acts = (16 * 64 + 16 * 64 + 16 * 4) * 4
        self.assertEqual(m["activations"], {"bytes": acts, "halfBytes": acts // 2, "measured": True})
        self.assertEqual(m["totalBytes"], params * 4 + 16 + acts)
        self.assertEqual(m["autocast"], {"params": params, "grads": params, "optimizerState": 2 * params + 16, "activations": acts // 2, "weightCopies": params // 2,
                                         "totalBytes": params * 4 + 16 + acts // 2 + params // 2})
        self.assertEqual(m["halfParams"], {"params": params // 2, "grads": params // 2, "optimizerState": params + 16, "activations": acts // 2,
                                           "totalBytes": params * 2 + 16 + acts // 2})

    def test_out_of_memory_before_the_first_step_measures_what_exists_and_estimates_the_rest(self):
        script = MLP.replace("loss_fn(model(x), y).backward()", "loss_fn(model(x), y).backward() if step else loss_fn(model(x), y) + torch.empty(1 << 60).sum()")
        path, ours, messages = self.run_script("oom.py", script)
        self.assertIn(b"DefaultCPUAllocator: can't allocate memory", ours.stderr)
        o = self.one(messages, "oomMemory")
        params = 2372 * 4
        self.assertFalse(o["firstStepDone"])
        self.assertEqual(o["raisedAt"]["line"], self.line_of(path, "torch.empty(1 << 60)"))
        m = o["memory"]
        self.assertEqual(m["params"]["bytes"], params)
        self.assertEqual((m["grads"]["bytes"], m["grads"]["measured"]), (params, False))
        self.assertEqual((m["optimizerState"]["bytes"], m["optimizerState"]["measured"]), (2 * params, False))
        self.assertIn("2 copies", m["optimizerState"]["note"])
        acts = (16 * 64 + 16 * 64 + 16 * 4) * 4
        self.assertEqual(m["activations"], {"bytes": acts, "halfBytes": acts // 2, "measured": True, "note": "up to the failure"})

    def test_out_of_memory_after_the_first_step_has_measured_gradients_and_optimizer_state(self):
        script = MLP.replace("opt.step()", "opt.step()\n        if step: torch.empty(1 << 60)")
        _, ours, messages = self.run_script("oom.py", script)
        o = self.one(messages, "oomMemory")
        params = 2372 * 4
        self.assertTrue(o["firstStepDone"])
        m = o["memory"]
        self.assertEqual((m["grads"]["bytes"], m["grads"]["measured"]), (params, True))
        self.assertEqual((m["optimizerState"]["bytes"], m["optimizerState"]["measured"]), (2 * params + 16, True))
        self.assertTrue(m["activations"]["measured"])
        self.assertNotIn("note", m["activations"])


if __name__ == "__main__":
    unittest.main()
