#!/usr/bin/python3
"""Data-parallel training of a small ResNet on Fashion-MNIST: PyTorch + mpi4py.

PyTorch computes, MPI communicates, and torch.distributed is not used: the
gradients are averaged the way Horovod does it inside.

  * Every rank builds the same model from --seed (torch.manual_seed): a stem
    convolution, three residual blocks (3x3 convolutions, BatchNorm, ReLU,
    identity or 1x1 projection shortcuts; --channels C1,C2 wide, 28x28 ->
    14x14 -> 7x7) and a head C2*7*7 -> --fc -> 10.
  * Every epoch all ranks draw the same permutation of the training set; each
    full global batch of it is split into one contiguous shard per rank (the
    last N mod B images of a permutation are left out, as drop_last does).
  * Every parameter's gradient lives in one persistent, contiguous float32
    tensor (p.grad, zeroed in place each step: autograd accumulates into it
    in place), so a numpy view of it stays valid for the whole run.
  * A hook on each parameter's AccumulateGrad node (the autograd node that
    writes p.grad) posts ``comm.Iallreduce(MPI.IN_PLACE, view, op=MPI.SUM)``
    as soon as the backward pass has produced that gradient: the head's
    first, while the convolutions below are still being differentiated.
    The calls go out in one fixed order on every rank (the parameters' in
    reverse), whatever order autograd produces the gradients in: MPI matches
    collectives by order (see GradientAllreducer).
  * ``MPI.Request.Waitall`` before the SGD step.  The loss is summed over the
    shard and divided by the global batch size, so the summed gradients are
    already the global batch's mean: every rank takes the same step.
  * BatchNorm normalizes with each rank's shard statistics (as DDP does
    without SyncBatchNorm); before each test evaluation rank 0's running
    statistics are broadcast (DDP's broadcast_buffers), so every parameter
    and buffer ends up the same on every rank.

Data: the gzipped IDX files of the Debian package ``dataset-fashion-mnist``
(/usr/share/datasets/fashion-mnist), or --data DIR with the same four files, read by
fashion_mnist_data.py beside this file.
Needs Debian's python3-torch, python3-numpy and python3-mpi4py, so run it with
/usr/bin/python3, and give each rank one thread when ranks share cores:

    mpirun -np 2 --bind-to none -x OMP_NUM_THREADS=1 \\
        /usr/bin/python3 examples/pytorch_train.py --train-samples 8000 --epochs 1

Defaults: 2 epochs over all 60000 training images, global batch 128, lr 0.05,
momentum 0.9, weight decay 1e-4 (weights, not biases or BatchNorm), no label
smoothing.  Mikami et al.'s recipe (arXiv 1811.05233), each part switchable:
--batch-schedule "128:2,256" (batch-size control: 128 for 2 epochs, then 256;
the learning rate is --lr at the schedule's first batch size and scales
linearly with it) and --label-smoothing 0.1.

Output (rank 0): a config line, one line per epoch, then a final line:

    epoch E batch B lr X loss L train_acc A test_acc T samples/s S comm_ms C
    final test_acc T total_s S samples/s S comm_s C weights_identical yes|no

loss and train_acc: over the epoch's training samples, as the model stood
when it saw them; test_acc: on the test images (--test-samples N: the first
N) after the epoch; samples/s: the epoch's training samples over its wall
time (slowest rank, test excluded); comm_ms: time in Waitall, mean over
ranks.  weights_identical compares the SHA-256 of every parameter and buffer
across ranks; the program exits 1 if they differ.  --json FILE also writes the
configuration, the epochs and the summary to FILE.
"""
import argparse
import hashlib
import json
import sys
import time

import numpy as np
import torch
from mpi4py import MPI
from torch import nn

from fashion_mnist_data import (NUM_CLASSES, add_training_options, load_dataset, normalized,
                                set_epoch_batches)

EVAL_BATCH = 500


# ---- Options ----------------------------------------------------------------------------------

def parse_args():
    parser = argparse.ArgumentParser(
        description="Data-parallel PyTorch ResNet training on Fashion-MNIST over mpi4py.")
    add_training_options(parser)
    parser.add_argument("--weight-decay", type=float, default=1e-4,
                        help="L2 penalty on the weights, not biases or BatchNorm "
                             "(default: %(default)s)")
    parser.add_argument("--channels", default="16,32",
                        help="widths of the 28x28/14x14 and the 7x7 stages (default: %(default)s)")
    parser.add_argument("--fc", type=int, default=256,
                        help="width of the hidden fully connected layer (default: %(default)s)")
    parser.add_argument("--test-samples", type=int, default=0,
                        help="test on the first N of the 10000 test images, "
                             "0 = all (default: %(default)s)")
    args = parser.parse_args()
    try:
        args.channel_sizes = [int(c) for c in args.channels.split(",")]
        if len(args.channel_sizes) != 2 or min(args.channel_sizes) < 1:
            raise ValueError
    except ValueError:
        parser.error("--channels must be two positive integers, e.g. 16,32")
    set_epoch_batches(parser, args)
    if (args.epochs < 1 or args.train_samples < 0 or args.test_samples < 0 or args.fc < 1
            or not 0 <= args.label_smoothing < 1 or args.lr <= 0
            or not 0 <= args.momentum < 1 or args.weight_decay < 0):
        parser.error("need --epochs >= 1, --train-samples/--test-samples >= 0, --fc >= 1, "
                     "--lr > 0, 0 <= --momentum < 1, --weight-decay >= 0, "
                     "0 <= --label-smoothing < 1")
    return args


def to_input(images):
    """uint8 pixels [N, 28, 28] -> normalized float32 tensor [N, 1, 28, 28]."""
    return torch.from_numpy(normalized(images)).unsqueeze(1)


# ---- Model ------------------------------------------------------------------------------------

class ResidualBlock(nn.Module):
    """relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)), 3x3 convolutions; the shortcut is a 1x1
    projection where the block changes the width or the resolution."""

    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """stem 3x3 conv (28x28, C1) -> max pool -> block C1 (14x14) -> block C1->C2 stride 2 (7x7)
    -> block C2 -> flatten -> fc -> ReLU -> 10 logits.  The head flattens instead of pooling
    globally, so that one gradient (fc's weight, C2*49*fc floats) is large, as in real models."""

    def __init__(self, channels, fc_width):
        super().__init__()
        c1, c2 = channels
        self.stem = nn.Sequential(nn.Conv2d(1, c1, 3, 1, 1, bias=False), nn.BatchNorm2d(c1),
                                  nn.ReLU(), nn.MaxPool2d(2))
        self.blocks = nn.Sequential(ResidualBlock(c1, c1, 1), ResidualBlock(c1, c2, 2),
                                    ResidualBlock(c2, c2, 1))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(c2 * 7 * 7, fc_width), nn.ReLU(),
                                  nn.Linear(fc_width, NUM_CLASSES))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


# ---- Gradient averaging over MPI --------------------------------------------------------------

class GradientAllreducer:
    """Posts one MPI_Iallreduce(IN_PLACE, SUM) per parameter as the backward pass produces the
    gradients, and completes them all in wait().

    Each p.grad is allocated once, contiguous float32, and only ever zeroed in place: autograd's
    AccumulateGrad then adds into it in place, so the numpy view taken here stays the buffer MPI
    reads and writes.  The hook runs right after AccumulateGrad has written p.grad; nothing
    touches that gradient again until wait() returns.

    MPI matches collectives by their order on the communicator, so every rank must post the same
    gradients in the same order, or it silently adds different tensors of the same size.  The
    order in which autograd produces them is not guaranteed to be that: a rank whose shard of a
    global batch is empty gets BatchNorm's bias gradient before its weight's.  So the calls go
    out in one fixed order, the parameters' in reverse (last layer first, as DDP's buckets): a
    ready gradient is posted as soon as every gradient before it in that order has been."""

    def __init__(self, comm, model):
        self.comm = comm
        self.params = list(model.parameters())[::-1]  # the posting order, the same on every rank
        self.views = []
        self.ready = [False] * len(self.params)
        self.posted = 0
        self.requests = []
        self._accumulators = []  # the hooked nodes must stay alive
        for index, param in enumerate(self.params):
            if param.dtype != torch.float32:
                raise TypeError("GradientAllreducer: float32 parameters only")
            param.grad = torch.zeros_like(param, memory_format=torch.contiguous_format)
            self.views.append(param.grad.numpy())
            accumulator = param.expand_as(param).grad_fn.next_functions[0][0]
            accumulator.register_hook(self._hook(index))
            self._accumulators.append(accumulator)

    def _hook(self, index):
        param, address = self.params[index], self.views[index].ctypes.data

        def gradient_ready(*_):
            if param.grad is None or param.grad.data_ptr() != address:
                raise RuntimeError("a gradient buffer moved: zero p.grad in place, "
                                   "never set it to None")
            self.ready[index] = True
            while self.posted < len(self.params) and self.ready[self.posted]:
                self.requests.append(
                    self.comm.Iallreduce(MPI.IN_PLACE, self.views[self.posted], op=MPI.SUM))
                self.posted += 1
        return gradient_ready

    def zero_grad(self):
        for param in self.params:
            param.grad.zero_()

    def wait(self):
        """Completes this step's allreduces; returns the seconds spent waiting."""
        if self.posted != len(self.params):
            raise RuntimeError("%d of %d parameters got a gradient: every parameter must take "
                               "part in every step" % (sum(self.ready), len(self.params)))
        start = time.perf_counter()
        MPI.Request.Waitall(self.requests)
        seconds = time.perf_counter() - start
        self.requests = []
        self.ready = [False] * len(self.params)
        self.posted = 0
        return seconds


def broadcast_buffers(comm, model):
    """Rank 0's BatchNorm running statistics to every rank."""
    for buffer in model.buffers():
        comm.Bcast(buffer.numpy(), root=0)


# ---- Training ---------------------------------------------------------------------------------

def make_optimizer(model, lr, momentum, weight_decay):
    """SGD with momentum; weight decay on convolution and linear weights only."""
    decayed = [p for p in model.parameters() if p.dim() > 1]
    others = [p for p in model.parameters() if p.dim() <= 1]
    return torch.optim.SGD([{"params": decayed, "weight_decay": weight_decay},
                            {"params": others, "weight_decay": 0.0}], lr=lr, momentum=momentum)


def train_epoch(comm, model, allreducer, optimizer, loss_fn, images, labels, order, global_batch):
    """One epoch: the full global batches of `order` (the last len(order) % global_batch samples
    are left out: a batch of a few samples, normalized by BatchNorm over those few, would take a
    full step).  Returns (loss sum, correct count, Waitall seconds) of this rank."""
    rank, size = comm.Get_rank(), comm.Get_size()
    n = global_batch
    model.train()
    loss_sum = correct = comm_seconds = 0.0
    for start in range(0, len(order) - n + 1, n):
        shard = order[start + n * rank // size:start + n * (rank + 1) // size]
        x, y = to_input(images[shard]), torch.from_numpy(labels[shard])
        allreducer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        (loss / n).backward()  # the hooks post the allreduces during this call
        comm_seconds += allreducer.wait()
        optimizer.step()
        loss_sum += loss.item()
        correct += (logits.argmax(dim=1) == y).sum().item()
    return loss_sum, correct, comm_seconds


def test_accuracy(comm, model, images, labels):
    """Accuracy on the test images; each rank scores one contiguous shard."""
    rank, size = comm.Get_rank(), comm.Get_size()
    lo, hi = len(images) * rank // size, len(images) * (rank + 1) // size
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(lo, hi, EVAL_BATCH):
            end = min(start + EVAL_BATCH, hi)
            logits = model(to_input(images[start:end]))
            correct += (logits.argmax(dim=1) == torch.from_numpy(labels[start:end])).sum().item()
    counts = np.array([correct, hi - lo], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    return counts[0] / counts[1]


def state_digest(model):
    """SHA-256 (hex) of every parameter's and buffer's bytes."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def main():
    args = parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    (train_images, train_labels), (test_images, test_labels) = load_dataset(comm, args.data)
    if args.train_samples:
        train_images = train_images[:args.train_samples]
        train_labels = train_labels[:args.train_samples]
    if args.test_samples:
        test_images = test_images[:args.test_samples]
        test_labels = test_labels[:args.test_samples]
    num_train = len(train_images)
    if not size <= min(args.epoch_batches) <= max(args.epoch_batches) <= num_train:
        if rank == 0:
            print("error: every global batch must be at least the %d ranks and at most the %d "
                  "training images" % (size, num_train), file=sys.stderr)
        sys.exit(2)

    torch.manual_seed(args.seed)
    model = SmallResNet(args.channel_sizes, args.fc)
    allreducer = GradientAllreducer(comm, model)
    optimizer = make_optimizer(model, args.lr, args.momentum, args.weight_decay)
    loss_fn = nn.CrossEntropyLoss(reduction="sum", label_smoothing=args.label_smoothing)
    grad_bytes = [p.numel() * p.element_size() for p in model.parameters()]
    model_name = "resnet-%s-fc%d" % ("-".join(map(str, args.channel_sizes)), args.fc)
    if rank == 0:
        print("config ranks %d train_samples %d test_samples %d model %s params %d "
              "gradients %d largest_gradient_bytes %d threads %d"
              % (size, num_train, len(test_images), model_name,
                 sum(p.numel() for p in model.parameters()), len(grad_bytes), max(grad_bytes),
                 torch.get_num_threads()), flush=True)

    history = []
    total_samples = total_train_seconds = total_comm_seconds = 0.0
    for epoch, global_batch in enumerate(args.epoch_batches, start=1):
        lr = args.lr * global_batch / args.epoch_batches[0]
        for group in optimizer.param_groups:
            group["lr"] = lr
        order = np.random.default_rng([args.seed, epoch]).permutation(num_train)
        comm.Barrier()
        epoch_start = time.perf_counter()
        loss_sum, correct, comm_seconds = train_epoch(
            comm, model, allreducer, optimizer, loss_fn, train_images, train_labels, order,
            global_batch)
        train_seconds = comm.allreduce(time.perf_counter() - epoch_start, op=MPI.MAX)

        sums = np.array([loss_sum, correct, comm_seconds], dtype=np.float64)
        comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        broadcast_buffers(comm, model)
        accuracy = test_accuracy(comm, model, test_images, test_labels)
        trained = num_train // global_batch * global_batch
        total_samples += trained
        total_train_seconds += train_seconds
        total_comm_seconds += sums[2] / size
        record = {"epoch": epoch, "batch": global_batch, "lr": lr,
                  "loss": sums[0] / trained, "train_acc": sums[1] / trained,
                  "test_acc": accuracy, "samples_per_s": trained / train_seconds,
                  "comm_ms": sums[2] / size * 1e3}
        history.append(record)
        if rank == 0:
            print("epoch %d batch %d lr %g loss %.4f train_acc %.4f test_acc %.4f samples/s %.0f "
                  "comm_ms %.1f" % (epoch, global_batch, lr, record["loss"], record["train_acc"],
                                    accuracy, record["samples_per_s"], record["comm_ms"]),
                  flush=True)

    digest = state_digest(model)
    identical = len(set(comm.allgather(digest))) == 1
    final = {"test_acc": history[-1]["test_acc"], "total_s": total_train_seconds,
             "samples_per_s": total_samples / total_train_seconds,
             "comm_s": total_comm_seconds, "weights_identical": identical,
             "weights_sha256": digest}
    if rank == 0:
        print("final test_acc %.4f total_s %.2f samples/s %.0f comm_s %.2f weights_identical %s"
              % (final["test_acc"], final["total_s"], final["samples_per_s"], final["comm_s"],
                 "yes" if identical else "no"), flush=True)
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"ranks": size, "model": model_name, "config": vars(args),
                           "epochs": history, "final": final}, out, indent=2)
                out.write("\n")
    sys.exit(0 if identical else 1)


if __name__ == "__main__":
    main()
