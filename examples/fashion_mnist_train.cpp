/*
 * fashion_mnist_train: data-parallel training of a multilayer perceptron on Fashion-MNIST, a plain
 * MPI program (C++17 and the MPI C API, nothing else). It knows nothing about libgfshim; preload
 * the shim to see it take the gradient allreduces:
 *
 *   mpirun -np 4 --bind-to none build/examples/fashion_mnist_train
 *   mpirun -np 4 --bind-to none -x LD_PRELOAD=$PWD/build/libgfshim.so -x GFSHIM_STATS=1 \
 *       build/examples/fashion_mnist_train
 *
 * Data: the gzipped IDX files of the Debian package dataset-fashion-mnist (fashion_mnist.h).
 * Model: 784 -> hidden widths (--hidden, default 512,256) -> 10, ReLU, softmax cross-entropy with
 * optional label smoothing, float32, He-normal weights from --seed: identical on every rank.
 *
 * One training step, as data-parallel frameworks (Horovod, PyTorch DDP) do it:
 *
 *   every rank draws the same permutation of the training set each epoch; each global batch of B
 *   samples is split into one contiguous shard per rank (sizes differ by at most one)
 *   forward pass of the shard; gradient of the shard's share of the batch's mean loss (the loss
 *   summed over the shard, divided by B), so the sum over the ranks is the mean loss's gradient,
 *   scaled the same way every step (as PyTorch DDP and Horovod average), short batches included
 *   backward pass, last layer first: as soon as a layer's weight gradient and bias gradient
 *   exist, one MPI_Iallreduce(MPI_IN_PLACE, SUM) is posted for each, and the pass goes on to the
 *   layer below while they are in flight (the buffers stay untouched until MPI_Waitall)
 *   MPI_Waitall, then SGD with momentum on that gradient: every rank applies the same update to
 *   the same weights, so the weights stay bit-identical on every rank
 *
 * The recipe of Mikami et al. (arXiv 1811.05233), small: batch-size control (--batch-schedule
 * "128:3,256:3,512", the default = batch 128 for 3 epochs, 256 for 3, then 512 to the end) with the
 * learning rate scaled linearly with the batch (--lr is the rate at the schedule's first batch
 * size; --lr-scaling none keeps it), an optional linear warm-up (--warmup-epochs), and label
 * smoothing (--label-smoothing, 0 = off).
 *
 * Output (rank 0): a config line, one line per epoch, a final line, easy to parse:
 *
 *   epoch E batch B lr X loss L train_acc A test_acc T samples/s S comm_ms C compute_ms K
 *   final test_acc T total_s S samples/s S comm_s C weights_identical yes|no
 *
 * loss and train_acc: over the epoch's training samples, as the model stood when it saw them;
 * test_acc: on the test set after the epoch (each rank scores a shard, counts summed with a small
 * MPI_Allreduce); samples/s: the epoch's training samples over its wall time (slowest rank, test
 * excluded); comm_ms: time in MPI_Waitall, what the step waits for communication after its
 * backward pass (without an MPI progress thread the nonblocking allreduces mostly progress in
 * there, so it is close to the whole allreduce time, including waits for slower ranks); compute_ms:
 * the rest of the step (both means over ranks). total_s and comm_s sum the epochs.
 * weights_identical compares a checksum of every parameter's bits across ranks (MPI_MIN against
 * MPI_MAX); the program exits 1 if they differ, 2 on a usage or data error.
 * --json FILE writes the configuration, the epochs and the summary to FILE.
 *
 * Defaults (12 epochs on all 60000 images) reach about 0.89 test accuracy. The matrix products
 * are blocked loops that -O3 vectorizes; there are no threads, so with one rank per core the
 * ranks use the machine. Same options, seeds, rank count and machine: same results, run after
 * run, with an exact allreduce.
 */
// The MPI C API only: keep mpi.h from pulling in the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fashion_mnist.h"

namespace {

// ---- Options ------------------------------------------------------------------------------------

struct BatchPhase {
  int globalBatch;
  int epochs;  // 0: the last phase, to the end of training
};

struct Options {
  std::string dataDirectory = fashion_mnist::kDefaultDirectory;
  int epochs = 12;
  uint64_t seed = 1;
  std::string hiddenText = "512,256";
  std::vector<int> hiddenWidths = {512, 256};
  std::string batchScheduleText = "128:3,256:3,512";
  std::vector<BatchPhase> batchSchedule = {{128, 3}, {256, 3}, {512, 0}};
  double learningRate = 0.05;
  bool linearScaling = true;
  int warmupEpochs = 0;
  double momentum = 0.9;
  double weightDecay = 1e-4;
  double labelSmoothing = 0.1;
  int trainSamples = 0;  // 0: all
  int testSamples = 0;   // 0: all
  std::string jsonPath;
  bool quiet = false;
};

const char kUsage[] =
    "usage: fashion_mnist_train [options]   (under mpirun; every rank gets the same options)\n"
    "  --data DIR             Fashion-MNIST's four *-ubyte.gz files (default "
    "/usr/share/datasets/fashion-mnist)\n"
    "  --epochs N             epochs to train (default 12)\n"
    "  --seed N               seed of the initial weights and of the epochs' shuffles (default 1)\n"
    "  --hidden W1,W2,...     hidden layer widths (default 512,256)\n"
    "  --batch-schedule S     global batch per epoch: B1:E1,B2:E2,...,Bn = B1 for E1 epochs, then\n"
    "                         B2 for E2, ..., Bn to the end; one number = a fixed batch\n"
    "                         (default 128:3,256:3,512)\n"
    "  --lr X                 learning rate at the schedule's first batch size (default 0.05)\n"
    "  --lr-scaling linear|none  scale the rate with the batch size, or keep it (default linear)\n"
    "  --warmup-epochs N      ramp the rate up linearly over the first N epochs, 0 = off "
    "(default 0)\n"
    "  --momentum X           SGD momentum (default 0.9)\n"
    "  --weight-decay X       L2 penalty on the weights, not the biases (default 1e-4)\n"
    "  --label-smoothing X    label smoothing epsilon, 0 = off (default 0.1)\n"
    "  --train-samples N      train on the first N training images, 0 = all 60000 (default 0)\n"
    "  --test-samples N       test on the first N test images, 0 = all 10000 (default 0)\n"
    "  --json FILE            write the configuration, the epochs and the summary to FILE\n"
    "  --quiet                print the final line only\n";

bool parseInteger(const std::string& text, long min, long max, long* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long parsed = strtol(text.c_str(), &end, 10);
  if (errno || *end || parsed < min || parsed > max) return false;
  *value = parsed;
  return true;
}

bool parseReal(const std::string& text, double min, double max, double* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double parsed = strtod(text.c_str(), &end);
  if (errno || *end || !(parsed >= min && parsed <= max)) return false;
  *value = parsed;
  return true;
}

std::vector<std::string> splitAt(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at; (at = text.find(separator, start)) != std::string::npos; start = at + 1) {
    parts.push_back(text.substr(start, at - start));
  }
  parts.push_back(text.substr(start));
  return parts;
}

bool parseWidths(const std::string& text, std::vector<int>* widths, std::string* error) {
  widths->clear();
  for (const std::string& part : splitAt(text, ',')) {
    long width;
    if (!parseInteger(part, 1, 1 << 16, &width)) {
      *error = "--hidden '" + text + "': give widths 1..65536 separated by commas, e.g. 512,256";
      return false;
    }
    widths->push_back(int(width));
  }
  if (widths->size() > 16) {
    *error = "--hidden '" + text + "': at most 16 hidden layers";
    return false;
  }
  return true;
}

bool parseSchedule(const std::string& text, std::vector<BatchPhase>* schedule, std::string* error) {
  schedule->clear();
  std::vector<std::string> entries = splitAt(text, ',');
  for (size_t e = 0; e < entries.size(); e++) {
    std::vector<std::string> fields = splitAt(entries[e], ':');
    bool last = e + 1 == entries.size();
    long batch, epochs = 0;
    bool ok = fields.size() == (last ? 1u : 2u) && parseInteger(fields[0], 1, 1 << 24, &batch) &&
              (last || parseInteger(fields[1], 1, 1 << 20, &epochs));
    if (!ok) {
      *error = "--batch-schedule '" + text +
               "': give BATCH:EPOCHS entries and a last BATCH without epochs, which lasts to the "
               "end, e.g. 128:2,256:2,512 or 256";
      return false;
    }
    schedule->push_back({int(batch), int(epochs)});
  }
  return true;
}

// Fills *options from argv ("--name value" or "--name=value"); false with *error on a bad one.
bool parseOptions(int argc, char** argv, Options* options, std::string* error) {
  for (int i = 1; i < argc; i++) {
    std::string name = argv[i], value;
    size_t equals = name.find('=');
    bool inlineValue = equals != std::string::npos;
    if (inlineValue) {
      value = name.substr(equals + 1);
      name.resize(equals);
    }
    if (name == "--help" || name == "-h") {
      *error = "";
      return false;
    }
    if (name == "--quiet") {
      options->quiet = true;
      continue;
    }
    static const char* const kValueOptions[] = {"--data",
                                                "--epochs",
                                                "--seed",
                                                "--hidden",
                                                "--batch-schedule",
                                                "--lr",
                                                "--lr-scaling",
                                                "--warmup-epochs",
                                                "--momentum",
                                                "--weight-decay",
                                                "--label-smoothing",
                                                "--train-samples",
                                                "--test-samples",
                                                "--json"};
    if (std::find(std::begin(kValueOptions), std::end(kValueOptions), name) ==
        std::end(kValueOptions)) {
      *error = "unknown option '" + name + "'";
      return false;
    }
    if (!inlineValue) {
      if (i + 1 >= argc) {
        *error = name + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    long integer = 0;
    double real = 0;
    auto badValue = [&](const char* expected) {
      *error = name + " '" + value + "': expected " + expected;
      return false;
    };
    if (name == "--data") {
      if (value.empty()) return badValue("a directory");
      options->dataDirectory = value;
    } else if (name == "--epochs") {
      if (!parseInteger(value, 1, 1 << 20, &integer)) return badValue("an integer >= 1");
      options->epochs = int(integer);
    } else if (name == "--seed") {
      if (!parseInteger(value, 0, 0x7fffffffffffffffL, &integer)) {
        return badValue("an integer >= 0");
      }
      options->seed = uint64_t(integer);
    } else if (name == "--hidden") {
      options->hiddenText = value;
      if (!parseWidths(value, &options->hiddenWidths, error)) return false;
    } else if (name == "--batch-schedule") {
      options->batchScheduleText = value;
      if (!parseSchedule(value, &options->batchSchedule, error)) return false;
    } else if (name == "--lr") {
      if (!parseReal(value, 1e-9, 100, &real)) return badValue("a number in (0, 100]");
      options->learningRate = real;
    } else if (name == "--lr-scaling") {
      if (value != "linear" && value != "none") return badValue("linear or none");
      options->linearScaling = value == "linear";
    } else if (name == "--warmup-epochs") {
      if (!parseInteger(value, 0, 1 << 20, &integer)) return badValue("an integer >= 0");
      options->warmupEpochs = int(integer);
    } else if (name == "--momentum") {
      if (!parseReal(value, 0, 0.999, &real)) return badValue("a number in [0, 0.999]");
      options->momentum = real;
    } else if (name == "--weight-decay") {
      if (!parseReal(value, 0, 1, &real)) return badValue("a number in [0, 1]");
      options->weightDecay = real;
    } else if (name == "--label-smoothing") {
      if (!parseReal(value, 0, 0.999, &real)) return badValue("a number in [0, 0.999]");
      options->labelSmoothing = real;
    } else if (name == "--train-samples") {
      if (!parseInteger(value, 0, 1 << 30, &integer)) return badValue("an integer >= 0");
      options->trainSamples = int(integer);
    } else if (name == "--test-samples") {
      if (!parseInteger(value, 0, 1 << 30, &integer)) return badValue("an integer >= 0");
      options->testSamples = int(integer);
    } else if (name == "--json") {
      if (value.empty()) return badValue("a file name");
      options->jsonPath = value;
    }
  }
  if (options->warmupEpochs > options->epochs) {
    *error = "--warmup-epochs " + std::to_string(options->warmupEpochs) + " exceeds --epochs " +
             std::to_string(options->epochs);
    return false;
  }
  return true;
}

int globalBatchOfEpoch(const std::vector<BatchPhase>& schedule, int epoch) {
  for (const BatchPhase& phase : schedule) {
    if (phase.epochs == 0 || epoch < phase.epochs) return phase.globalBatch;
    epoch -= phase.epochs;
  }
  return schedule.back().globalBatch;
}

// ---- Random numbers: the same sequence on every rank --------------------------------------------

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniformOpen() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1)
  double normal() {  // Box-Muller; one value per call keeps the sequence simple
    return std::sqrt(-2.0 * std::log(uniformOpen())) * std::cos(6.283185307179586 * uniformOpen());
  }

 private:
  uint64_t state_;
};

// The order in which epoch `epoch` visits the training samples.
std::vector<uint32_t> epochPermutation(uint64_t seed, int epoch, int samples) {
  std::vector<uint32_t> order(samples);
  for (int i = 0; i < samples; i++) order[i] = uint32_t(i);
  SplitMix64 random(seed ^ (0xd1b54a32d192ed03ull * uint64_t(epoch + 1)));
  for (int i = samples - 1; i > 0; i--) {  // Fisher-Yates; the modulo bias is below 2^-40
    std::swap(order[i], order[random.next() % uint64_t(i + 1)]);
  }
  return order;
}

// ---- Dense kernels: row-major, no allocation ----------------------------------------------------

// With GCC on x86-64 the matrix product is compiled three times, for AVX-512, for AVX2 with FMA
// and for baseline x86-64, and the loader picks the best the CPU runs (function multiversioning):
// about 3x faster than the baseline alone, and the binary still runs everywhere. The tile is
// forced inline because GCC inlines nothing across target options otherwise.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define FOR_EACH_X86_LEVEL \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define INLINE_INTO_EACH_LEVEL __attribute__((always_inline))
#else
#define FOR_EACH_X86_LEVEL
#define INLINE_INTO_EACH_LEVEL
#endif

// C[rows x Cols] = A[rows x depth] * B[depth x Cols]: a tile of C accumulated in a local array
// that stays in registers and L1, so every B row loaded serves Rows rows of A. lda and ldb/ldc
// are the row lengths of A and of B and C.
template <int Rows, int Cols>
INLINE_INTO_EACH_LEVEL inline void multiplyTile(const float* a, const float* b, float* c, int depth,
                                                int lda, int ldbc) {
  float tile[Rows][Cols] = {};
  for (int k = 0; k < depth; k++) {
    const float* bRow = b + size_t(k) * size_t(ldbc);
    for (int r = 0; r < Rows; r++) {
      float scale = a[size_t(r) * size_t(lda) + size_t(k)];
      for (int j = 0; j < Cols; j++) tile[r][j] += scale * bRow[j];
    }
  }
  for (int r = 0; r < Rows; r++) {
    for (int j = 0; j < Cols; j++) c[size_t(r) * size_t(ldbc) + size_t(j)] = tile[r][j];
  }
}

// C[m x n] = A[m x depth] * B[depth x n]. Full 4 x 64 tiles, then the leftover rows one at a
// time, then the leftover columns (n % 64) as row updates whose inner loop still vectorizes.
FOR_EACH_X86_LEVEL void multiply(const float* a, const float* b, float* c, int m, int depth,
                                 int n) {
  constexpr int kTileRows = 4, kTileCols = 64;
  int fullCols = n - n % kTileCols;
  for (int col = 0; col < fullCols; col += kTileCols) {
    int row = 0;
    for (; row + kTileRows <= m; row += kTileRows) {
      multiplyTile<kTileRows, kTileCols>(a + size_t(row) * size_t(depth), b + col,
                                         c + size_t(row) * size_t(n) + col, depth, depth, n);
    }
    for (; row < m; row++) {
      multiplyTile<1, kTileCols>(a + size_t(row) * size_t(depth), b + col,
                                 c + size_t(row) * size_t(n) + col, depth, depth, n);
    }
  }
  if (fullCols == n) return;
  for (int row = 0; row < m; row++) {
    float* cRow = c + size_t(row) * size_t(n);
    for (int j = fullCols; j < n; j++) cRow[j] = 0;
    for (int k = 0; k < depth; k++) {
      float scale = a[size_t(row) * size_t(depth) + size_t(k)];
      const float* bRow = b + size_t(k) * size_t(n);
      for (int j = fullCols; j < n; j++) cRow[j] += scale * bRow[j];
    }
  }
}

// out[cols x rows] = in[rows x cols] transposed, in 16 x 16 blocks.
void transpose(const float* in, int rows, int cols, float* out) {
  constexpr int kBlock = 16;
  for (int r0 = 0; r0 < rows; r0 += kBlock) {
    for (int c0 = 0; c0 < cols; c0 += kBlock) {
      int rEnd = std::min(rows, r0 + kBlock), cEnd = std::min(cols, c0 + kBlock);
      for (int r = r0; r < rEnd; r++) {
        for (int c = c0; c < cEnd; c++) {
          out[size_t(c) * size_t(rows) + size_t(r)] = in[size_t(r) * size_t(cols) + size_t(c)];
        }
      }
    }
  }
}

// ---- Model --------------------------------------------------------------------------------------

// out = in * weights + bias, weights stored inputs x outputs.
struct DenseLayer {
  int inputs = 0, outputs = 0;
  std::vector<float> weights, bias;
  std::vector<float> weightGradient, biasGradient;  // summed over the global batch after Waitall
  std::vector<float> weightVelocity, biasVelocity;
};

// Layers widths[0] -> widths[1] -> ...; He-normal weights (standard deviation sqrt(2 / inputs)),
// zero biases, drawn from `seed` in a fixed order: the same model on every rank.
std::vector<DenseLayer> makeModel(const std::vector<int>& widths, uint64_t seed) {
  SplitMix64 random(seed);
  std::vector<DenseLayer> layers(widths.size() - 1);
  for (size_t l = 0; l < layers.size(); l++) {
    DenseLayer& layer = layers[l];
    layer.inputs = widths[l];
    layer.outputs = widths[l + 1];
    size_t weightCount = size_t(layer.inputs) * size_t(layer.outputs);
    double deviation = std::sqrt(2.0 / layer.inputs);
    layer.weights.resize(weightCount);
    for (float& w : layer.weights) w = float(deviation * random.normal());
    layer.bias.assign(size_t(layer.outputs), 0.0f);
    layer.weightGradient.assign(weightCount, 0.0f);
    layer.biasGradient.assign(size_t(layer.outputs), 0.0f);
    layer.weightVelocity.assign(weightCount, 0.0f);
    layer.biasVelocity.assign(size_t(layer.outputs), 0.0f);
  }
  return layers;
}

// Buffers of one forward and backward pass over up to `capacityRows` samples, allocated once.
struct Workspace {
  int capacityRows = 0;
  std::vector<std::vector<float>> activations;  // [0] the input, [l + 1] layer l's output
  std::vector<std::vector<float>> deltas;       // [l]: d loss / d (layer l's output before ReLU)
  std::vector<float> transposedInput;           // a layer's input, transposed, for its gradient
  std::vector<float> transposedWeights;         // a layer's weights, transposed, for the delta
  std::vector<uint8_t> labels;

  Workspace(const std::vector<DenseLayer>& layers, int rows) : capacityRows(rows) {
    size_t widest = 0, largestLayer = 0;
    activations.emplace_back(size_t(rows) * size_t(layers[0].inputs));
    for (const DenseLayer& layer : layers) {
      activations.emplace_back(size_t(rows) * size_t(layer.outputs));
      deltas.emplace_back(size_t(rows) * size_t(layer.outputs));
      widest = std::max(widest, size_t(layer.inputs));
      largestLayer = std::max(largestLayer, layer.weights.size());
    }
    transposedInput.resize(size_t(rows) * widest);
    transposedWeights.resize(largestLayer);
    labels.resize(size_t(rows));
  }
};

// Pixels of the samples `indices` as network inputs, normalized with Fashion-MNIST's training
// mean and standard deviation (0.2860 and 0.3530 of full scale), and their labels.
void loadSamples(const fashion_mnist::Split& split, const uint32_t* indices, int rows,
                 Workspace* work) {
  static const std::vector<float> kPixelToInput = [] {
    std::vector<float> table(256);
    for (int p = 0; p < 256; p++) table[size_t(p)] = float((p / 255.0 - 0.2860) / 0.3530);
    return table;
  }();
  size_t width = size_t(split.pixelsPerImage);
  float* inputs = work->activations[0].data();
  for (int r = 0; r < rows; r++) {
    const uint8_t* pixels = split.pixels.data() + size_t(indices[r]) * width;
    for (size_t i = 0; i < width; i++) inputs[size_t(r) * width + i] = kPixelToInput[pixels[i]];
    work->labels[size_t(r)] = split.labels[indices[r]];
  }
}

// Forward pass of `rows` samples in work->activations[0]; the logits end in the last activation.
void forward(const std::vector<DenseLayer>& layers, int rows, Workspace* work) {
  for (size_t l = 0; l < layers.size(); l++) {
    const DenseLayer& layer = layers[l];
    float* out = work->activations[l + 1].data();
    multiply(work->activations[l].data(), layer.weights.data(), out, rows, layer.inputs,
             layer.outputs);
    bool hidden = l + 1 < layers.size();
    for (int r = 0; r < rows; r++) {
      float* row = out + size_t(r) * size_t(layer.outputs);
      for (int j = 0; j < layer.outputs; j++) {
        float z = row[j] + layer.bias[size_t(j)];
        row[j] = hidden ? std::max(z, 0.0f) : z;
      }
    }
  }
}

int argmax(const float* values, int count) {
  return int(std::max_element(values, values + count) - values);
}

// Softmax cross-entropy of the logits against the labels smoothed by `smoothing` (target
// 1 - smoothing + smoothing / classes on the label, smoothing / classes elsewhere). Writes
// d (loss summed over the rows / batch) / d logits into `delta`, the rows' share of the mean loss
// over the step's global `batch`; adds the summed loss and the correct predictions.
void softmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows, int classes,
                         int batch, float smoothing, float* delta, double* lossSum, long* correct) {
  float offTarget = smoothing / float(classes), onTarget = 1.0f - smoothing + offTarget;
  float perSample = 1.0f / float(batch);
  for (int r = 0; r < rows; r++) {
    const float* z = logits + size_t(r) * size_t(classes);
    float* d = delta + size_t(r) * size_t(classes);
    int top = argmax(z, classes);
    float sumExp = 0;
    for (int k = 0; k < classes; k++) sumExp += std::exp(z[k] - z[top]);
    float logSumExp = z[top] + std::log(sumExp);
    double loss = 0;
    for (int k = 0; k < classes; k++) {
      float target = k == labels[r] ? onTarget : offTarget;
      loss -= double(target) * double(z[k] - logSumExp);
      d[k] = (std::exp(z[k] - logSumExp) - target) * perSample;
    }
    *lossSum += loss;
    *correct += top == labels[r];
  }
}

// Backward pass of `rows` samples after forward(); work->deltas.back() holds d loss / d logits.
// Posts the allreduce of each gradient as soon as it is computed, last layer first, and returns
// with the requests in flight: nothing may touch the gradients before MPI_Waitall.
void backwardAndPost(std::vector<DenseLayer>& layers, int rows, Workspace* work, MPI_Comm comm,
                     std::vector<MPI_Request>* requests) {
  requests->clear();
  for (size_t l = layers.size(); l-- > 0;) {
    DenseLayer& layer = layers[l];
    const float* delta = work->deltas[l].data();
    transpose(work->activations[l].data(), rows, layer.inputs, work->transposedInput.data());
    multiply(work->transposedInput.data(), delta, layer.weightGradient.data(), layer.inputs, rows,
             layer.outputs);
    std::fill(layer.biasGradient.begin(), layer.biasGradient.end(), 0.0f);
    for (int r = 0; r < rows; r++) {
      for (int j = 0; j < layer.outputs; j++) {
        layer.biasGradient[size_t(j)] += delta[size_t(r) * size_t(layer.outputs) + size_t(j)];
      }
    }
    requests->emplace_back();
    MPI_Iallreduce(MPI_IN_PLACE, layer.weightGradient.data(), int(layer.weightGradient.size()),
                   MPI_FLOAT, MPI_SUM, comm, &requests->back());
    requests->emplace_back();
    MPI_Iallreduce(MPI_IN_PLACE, layer.biasGradient.data(), int(layer.biasGradient.size()),
                   MPI_FLOAT, MPI_SUM, comm, &requests->back());
    if (l == 0) break;
    // The delta of the layer below: through the weights, then through its ReLU.
    transpose(layer.weights.data(), layer.inputs, layer.outputs, work->transposedWeights.data());
    float* below = work->deltas[l - 1].data();
    multiply(delta, work->transposedWeights.data(), below, rows, layer.outputs, layer.inputs);
    const float* belowOutput = work->activations[l].data();
    for (size_t i = 0; i < size_t(rows) * size_t(layer.inputs); i++) {
      if (belowOutput[i] <= 0) below[i] = 0;
    }
  }
}

// SGD with momentum on the gradients of the step's mean loss (summed over the ranks):
// v = momentum v + gradient (+ decay w for weights), w -= rate v.
void applyUpdate(std::vector<DenseLayer>& layers, float rate, float momentum, float weightDecay) {
  for (DenseLayer& layer : layers) {
    for (size_t i = 0; i < layer.weights.size(); i++) {
      float gradient = layer.weightGradient[i] + weightDecay * layer.weights[i];
      layer.weightVelocity[i] = momentum * layer.weightVelocity[i] + gradient;
      layer.weights[i] -= rate * layer.weightVelocity[i];
    }
    for (size_t j = 0; j < layer.bias.size(); j++) {
      layer.biasVelocity[j] = momentum * layer.biasVelocity[j] + layer.biasGradient[j];
      layer.bias[j] -= rate * layer.biasVelocity[j];
    }
  }
}

// Fraction of the first `samples` test images classified correctly; each rank scores one
// contiguous shard in chunks of the workspace's capacity.
double testAccuracy(const std::vector<DenseLayer>& layers, const fashion_mnist::Split& test,
                    int samples, Workspace* work, MPI_Comm comm, int rank, int ranks) {
  int begin = int(long(samples) * rank / ranks), end = int(long(samples) * (rank + 1) / ranks);
  std::vector<uint32_t> indices(size_t(work->capacityRows));
  long correct = 0;
  int classes = layers.back().outputs;
  for (int first = begin; first < end; first += work->capacityRows) {
    int rows = std::min(work->capacityRows, end - first);
    for (int r = 0; r < rows; r++) indices[size_t(r)] = uint32_t(first + r);
    loadSamples(test, indices.data(), rows, work);
    forward(layers, rows, work);
    const float* logits = work->activations.back().data();
    for (int r = 0; r < rows; r++) {
      correct += argmax(logits + size_t(r) * size_t(classes), classes) == work->labels[size_t(r)];
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &correct, 1, MPI_LONG, MPI_SUM, comm);
  return double(correct) / samples;
}

// FNV-1a over the bits of every parameter: equal on all ranks iff (almost surely) the weights are.
uint64_t parameterChecksum(const std::vector<DenseLayer>& layers) {
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&hash](const std::vector<float>& values) {
    for (float value : values) {
      uint32_t bits;
      memcpy(&bits, &value, sizeof bits);
      hash = (hash ^ bits) * 0x100000001b3ull;
    }
  };
  for (const DenseLayer& layer : layers) {
    mix(layer.weights);
    mix(layer.bias);
  }
  return hash;
}

bool weightsIdentical(const std::vector<DenseLayer>& layers, MPI_Comm comm) {
  uint64_t checksum = parameterChecksum(layers), lowest = 0, highest = 0;
  MPI_Allreduce(&checksum, &lowest, 1, MPI_UINT64_T, MPI_MIN, comm);
  MPI_Allreduce(&checksum, &highest, 1, MPI_UINT64_T, MPI_MAX, comm);
  return lowest == highest;
}

// ---- Training loop ------------------------------------------------------------------------------

struct EpochResult {
  int epoch, globalBatch;
  double learningRate, loss, trainAccuracy, testAccuracy, samplesPerSecond;
  double wallSeconds, commSeconds, computeSeconds;  // wall: slowest rank; comm, compute: mean
};

// The rate of one step: --lr at the schedule's first batch, scaled linearly with the batch, times
// the warm-up ramp (step + 1) / warmupSteps while the warm-up lasts.
double stepLearningRate(const Options& options, int globalBatch, long step, long warmupSteps) {
  double rate = options.learningRate;
  if (options.linearScaling) rate *= double(globalBatch) / options.batchSchedule[0].globalBatch;
  if (step < warmupSteps) rate *= double(step + 1) / double(warmupSteps);
  return rate;
}

long stepsOfEpoch(int trainSamples, int globalBatch) {
  return (long(trainSamples) + globalBatch - 1) / globalBatch;
}

void writeJson(const Options& options, const std::vector<int>& widths, long parameters, int ranks,
               int trainSamples, int testSamples, const std::vector<EpochResult>& epochs,
               double totalSeconds, double commSeconds, bool identical, FILE* out) {
  fprintf(out, "{\n  \"ranks\": %d,\n  \"layer_sizes\": [", ranks);
  for (size_t i = 0; i < widths.size(); i++) fprintf(out, "%s%d", i ? ", " : "", widths[i]);
  fprintf(out,
          "],\n  \"parameters\": %ld,\n  \"config\": {\"epochs\": %d, \"seed\": %llu, "
          "\"hidden\": \"%s\", \"batch_schedule\": \"%s\", \"lr\": %g, \"lr_scaling\": \"%s\", "
          "\"warmup_epochs\": %d, \"momentum\": %g, \"weight_decay\": %g, \"label_smoothing\": %g, "
          "\"train_samples\": %d, \"test_samples\": %d},\n  \"epochs\": [\n",
          parameters, options.epochs, static_cast<unsigned long long>(options.seed),
          options.hiddenText.c_str(), options.batchScheduleText.c_str(), options.learningRate,
          options.linearScaling ? "linear" : "none", options.warmupEpochs, options.momentum,
          options.weightDecay, options.labelSmoothing, trainSamples, testSamples);
  for (size_t e = 0; e < epochs.size(); e++) {
    const EpochResult& r = epochs[e];
    fprintf(out,
            "    {\"epoch\": %d, \"batch\": %d, \"lr\": %.6g, \"loss\": %.6f, \"train_acc\": %.6f, "
            "\"test_acc\": %.6f, \"samples_per_s\": %.1f, \"wall_s\": %.4f, \"comm_ms\": %.3f, "
            "\"compute_ms\": %.3f}%s\n",
            r.epoch, r.globalBatch, r.learningRate, r.loss, r.trainAccuracy, r.testAccuracy,
            r.samplesPerSecond, r.wallSeconds, r.commSeconds * 1e3, r.computeSeconds * 1e3,
            e + 1 < epochs.size() ? "," : "");
  }
  fprintf(out,
          "  ],\n  \"final\": {\"test_acc\": %.6f, \"total_s\": %.4f, \"samples_per_s\": %.1f, "
          "\"comm_s\": %.4f, \"weights_identical\": %s}\n}\n",
          epochs.back().testAccuracy, totalSeconds,
          double(trainSamples) * double(epochs.size()) / totalSeconds, commSeconds,
          identical ? "true" : "false");
}

// Reads both splits on every rank; all ranks fail together, and the first failing rank says why.
bool loadData(const Options& options, fashion_mnist::Split* train, fashion_mnist::Split* test,
              int rank, MPI_Comm comm) {
  std::string error;
  bool ok = fashion_mnist::loadSplit(options.dataDirectory, "train", train, &error) &&
            fashion_mnist::loadSplit(options.dataDirectory, "t10k", test, &error);
  if (ok && options.trainSamples > train->count) {
    error = "--train-samples " + std::to_string(options.trainSamples) + ": the training set has " +
            std::to_string(train->count) + " images";
    ok = false;
  }
  if (ok && options.testSamples > test->count) {
    error = "--test-samples " + std::to_string(options.testSamples) + ": the test set has " +
            std::to_string(test->count) + " images";
    ok = false;
  }
  int ranks, firstFailing = ok ? INT32_MAX : rank;
  MPI_Comm_size(comm, &ranks);
  MPI_Allreduce(MPI_IN_PLACE, &firstFailing, 1, MPI_INT, MPI_MIN, comm);
  if (firstFailing == rank) fprintf(stderr, "fashion_mnist_train: %s\n", error.c_str());
  return firstFailing == INT32_MAX;
}

int run(const Options& options, int rank, int ranks, MPI_Comm comm) {
  fashion_mnist::Split train, test;
  if (!loadData(options, &train, &test, rank, comm)) return 2;
  int trainSamples = options.trainSamples ? options.trainSamples : train.count;
  int testSamples = options.testSamples ? options.testSamples : test.count;
  int largestBatch = 0;
  for (const BatchPhase& phase : options.batchSchedule) {
    largestBatch = std::max(largestBatch, phase.globalBatch);
    if (phase.globalBatch < ranks || phase.globalBatch > trainSamples) {
      if (rank == 0) {
        fprintf(stderr,
                "fashion_mnist_train: --batch-schedule: batch %d must be at least the %d ranks "
                "(every rank takes a shard) and at most the %d training samples\n",
                phase.globalBatch, ranks, trainSamples);
      }
      return 2;
    }
  }

  FILE* json = nullptr;  // opened before training, so that a bad path fails at once
  int jsonOk = 1;
  if (rank == 0 && !options.jsonPath.empty()) {
    json = fopen(options.jsonPath.c_str(), "w");
    if (!json) {
      fprintf(stderr, "fashion_mnist_train: --json %s: %s\n", options.jsonPath.c_str(),
              strerror(errno));
      jsonOk = 0;
    }
  }
  MPI_Bcast(&jsonOk, 1, MPI_INT, 0, comm);
  if (!jsonOk) return 2;

  std::vector<int> widths = {train.pixelsPerImage};
  widths.insert(widths.end(), options.hiddenWidths.begin(), options.hiddenWidths.end());
  widths.push_back(fashion_mnist::kClasses);
  std::vector<DenseLayer> layers = makeModel(widths, options.seed);
  long parameters = 0;
  for (const DenseLayer& layer : layers)
    parameters += long(layer.weights.size() + layer.bias.size());
  constexpr int kTestChunkRows = 256;
  Workspace work(layers, std::max((largestBatch + ranks - 1) / ranks, kTestChunkRows));
  if (rank == 0 && !options.quiet) {
    std::string model;
    for (int width : widths) model += (model.empty() ? "" : "-") + std::to_string(width);
    printf(
        "config ranks %d train_samples %d test_samples %d model %s params %ld tensors %zu "
        "batch_schedule %s lr %g lr_scaling %s warmup_epochs %d momentum %g weight_decay %g "
        "label_smoothing %g seed %llu\n",
        ranks, trainSamples, testSamples, model.c_str(), parameters, 2 * layers.size(),
        options.batchScheduleText.c_str(), options.learningRate,
        options.linearScaling ? "linear" : "none", options.warmupEpochs, options.momentum,
        options.weightDecay, options.labelSmoothing, static_cast<unsigned long long>(options.seed));
    fflush(stdout);
  }

  long warmupSteps = 0;
  for (int e = 0; e < options.warmupEpochs; e++) {
    warmupSteps += stepsOfEpoch(trainSamples, globalBatchOfEpoch(options.batchSchedule, e));
  }
  std::vector<MPI_Request> requests;
  std::vector<EpochResult> results;
  long step = 0;
  double totalSeconds = 0, totalCommSeconds = 0;
  for (int epoch = 0; epoch < options.epochs; epoch++) {
    int globalBatch = globalBatchOfEpoch(options.batchSchedule, epoch);
    std::vector<uint32_t> order = epochPermutation(options.seed, epoch, trainSamples);
    double lossSum = 0, commSeconds = 0, computeSeconds = 0, rate = 0;
    long correct = 0;
    MPI_Barrier(comm);
    double epochStart = MPI_Wtime();
    for (int first = 0; first < trainSamples; first += globalBatch, step++) {
      double stepStart = MPI_Wtime();
      int batch = std::min(globalBatch, trainSamples - first);
      int shardBegin = int(long(batch) * rank / ranks);
      int rows = int(long(batch) * (rank + 1) / ranks) - shardBegin;
      loadSamples(train, order.data() + first + shardBegin, rows, &work);
      forward(layers, rows, &work);
      softmaxCrossEntropy(work.activations.back().data(), work.labels.data(), rows,
                          fashion_mnist::kClasses, batch, float(options.labelSmoothing),
                          work.deltas.back().data(), &lossSum, &correct);
      backwardAndPost(layers, rows, &work, comm, &requests);
      double waitStart = MPI_Wtime();
      MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
      double waitEnd = MPI_Wtime();
      rate = stepLearningRate(options, globalBatch, step, warmupSteps);
      applyUpdate(layers, float(rate), float(options.momentum), float(options.weightDecay));
      commSeconds += waitEnd - waitStart;
      computeSeconds += (MPI_Wtime() - stepStart) - (waitEnd - waitStart);
    }
    double wallSeconds = MPI_Wtime() - epochStart;

    double sums[4] = {lossSum, double(correct), commSeconds, computeSeconds};
    MPI_Allreduce(MPI_IN_PLACE, sums, 4, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Allreduce(MPI_IN_PLACE, &wallSeconds, 1, MPI_DOUBLE, MPI_MAX, comm);
    EpochResult result;
    result.epoch = epoch + 1;
    result.globalBatch = globalBatch;
    result.learningRate = rate;
    result.loss = sums[0] / trainSamples;
    result.trainAccuracy = sums[1] / trainSamples;
    result.testAccuracy = testAccuracy(layers, test, testSamples, &work, comm, rank, ranks);
    result.samplesPerSecond = trainSamples / wallSeconds;
    result.wallSeconds = wallSeconds;
    result.commSeconds = sums[2] / ranks;
    result.computeSeconds = sums[3] / ranks;
    results.push_back(result);
    totalSeconds += wallSeconds;
    totalCommSeconds += result.commSeconds;
    if (rank == 0 && !options.quiet) {
      printf(
          "epoch %d batch %d lr %.5g loss %.4f train_acc %.4f test_acc %.4f samples/s %.0f "
          "comm_ms %.1f compute_ms %.1f\n",
          result.epoch, globalBatch, rate, result.loss, result.trainAccuracy, result.testAccuracy,
          result.samplesPerSecond, result.commSeconds * 1e3, result.computeSeconds * 1e3);
      fflush(stdout);
    }
  }

  bool identical = weightsIdentical(layers, comm);
  if (rank == 0) {
    printf("final test_acc %.4f total_s %.2f samples/s %.0f comm_s %.3f weights_identical %s\n",
           results.back().testAccuracy, totalSeconds,
           double(trainSamples) * options.epochs / totalSeconds, totalCommSeconds,
           identical ? "yes" : "no");
    fflush(stdout);
  }
  if (json) {
    writeJson(options, widths, parameters, ranks, trainSamples, testSamples, results, totalSeconds,
              totalCommSeconds, identical, json);
    fclose(json);
  }
  return identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Options options;
  std::string error;
  int status;
  if (parseOptions(argc, argv, &options, &error)) {
    status = run(options, rank, ranks, MPI_COMM_WORLD);
  } else {
    if (rank == 0 && error.empty()) fputs(kUsage, stdout);
    if (rank == 0 && !error.empty()) {
      fprintf(stderr, "fashion_mnist_train: %s (--help lists the options)\n", error.c_str());
    }
    status = error.empty() ? 0 : 2;
  }
  MPI_Finalize();
  return status;
}
