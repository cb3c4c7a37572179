#!/usr/bin/env python3
"""The dependency direction the paths show (DESIGN.md, "The engine, one path"; issue 17 item 6):

  - mpi.h is included only under hooks/ and src/mpi/ (tools/, tests/, bench/ and examples/ are
    programs of their own);
  - nothing in src/ includes cuda/ or hooks/;
  - the GPU plugin and kernels (cuda/) include only their own headers, the plugin ABI header
    (src/gpu/gpu_plugin_api.h) and shared pure code (src/common, src/compress, src/config,
    src/algo);
  - every folder of src/ is compiled into exactly one build target.

Prints each violation and exits 1 when there is one. Argument: the source root (default: ..).
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
violations = []
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
SOURCES = ('.h', '.cpp', '.c', '.cu')


def includes(folder):
    """(path, included name) of every #include in the folder's sources."""
    for path in sorted((root / folder).rglob('*')):
        if path.suffix in SOURCES:
            for name in INCLUDE.findall(path.read_text(errors='replace')):
                yield path.relative_to(root).as_posix(), name


QUOTED = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
for folder in ('src', 'hooks', 'cuda'):
    for path, name in includes(folder):
        if name == 'mpi.h' and not path.startswith(('hooks/', 'src/mpi/')):
            violations.append(f'{path}: mpi.h outside hooks/ and src/mpi/')
        if folder == 'src' and name.startswith(('cuda/', 'hooks/')):
            violations.append(f'{path}: src/ includes {name}')
for path in sorted((root / 'cuda').rglob('*')):
    if path.suffix not in SOURCES:
        continue
    for name in QUOTED.findall(path.read_text(errors='replace')):
        own = (root / 'cuda' / name.removeprefix('cuda/')).exists()
        pure = re.fullmatch(r'(common|compress|config|algo)/\w+\.h', name)
        if not (own or pure or name == 'gpu/gpu_plugin_api.h'):
            violations.append(f'{path.relative_to(root)}: cuda/ includes {name}')

# Folder -> the targets whose source lists name a file in it (add_library / add_executable).
TARGET = re.compile(r'add_(?:library|executable)\(\s*([\w-]+)([^)]*)\)', re.S)
folders = {}
for cmake in sorted(list(root.rglob('CMakeLists.txt')) + list(root.rglob('*.cmake'))):
    relative = cmake.relative_to(root).as_posix()
    if relative.startswith('build'):
        continue
    # The fuzzers compile the parsers again with the fuzzer's instrumentation: the same sources in
    # another build configuration, not another owner.
    if relative.startswith('tests/fuzz/'):
        continue
    for target, body in TARGET.findall(cmake.read_text()):
        for word in body.split():
            match = re.search(r'(?:^|/)(src/\w+)/[\w.]+$', word)
            if match:
                folders.setdefault(match.group(1), set()).add(target)
if not folders:
    violations.append('no source folder found in the CMake files (the check is broken)')
for folder, targets in sorted(folders.items()):
    if len(targets) != 1:
        violations.append(f'{folder} is compiled into several targets: {", ".join(sorted(targets))}')

for violation in violations:
    print(f'dependency direction: {violation}')
if not violations:
    print(f'dependency direction: ok ({len(folders)} source folders, one target each)')
sys.exit(1 if violations else 0)
